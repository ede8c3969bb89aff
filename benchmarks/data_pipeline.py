"""Data pipeline: clips/s the training loader delivers against clips/s the training step consumes.

    .venv/bin/python benchmarks/data_pipeline.py [--corpus data/synthetic-seed0-clips14] [--rounds 3]

Loaders are `MOSDataModule.train_dataloader()` as `sqa.training.builder.build` makes it from
`conf/train.yaml` (synthetic corpus: 464 training clips at 16, 24 and 44.1 kHz, about 2 s each,
batches of 8): reading, resampling to 16 kHz, the random crop and collation, and with the MIDI
pitch branch on, f0 read from a warm on-disk cache (filled by one pass beforehand). Variants:
`preload` (the synthetic config's default: audio and f0 read once when the loader is built,
each step only crops and collates) and `num_workers` 0, 1, 2 and 4 (the default of the csv,
singmos_pro and singmos_vmc24 configs). A loader's rate is measured over one epoch from its first
batch on, so starting worker processes (once per run: workers are persistent) is not counted.

The consumer is the training step (forward, backward, clipping, SGD step) of the default log-mel
model, and of the wav2vec2-base-shaped model of `overhead.py`, on the same batches held in memory.
`fed` is the log-mel step driven by the loader itself, as in training, with workers and the step
sharing the machine: below the in-memory rate, the loader holds training back.
Everything alternates for `--rounds` rounds; figures are medians.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable

import lightning as L
import torch
from omegaconf import DictConfig
from overhead import bare_step, compose_config
from torch.utils.data import DataLoader

from sqa.training.builder import build

# (name, overrides of conf/data) of each loader variant.
LOADERS = [
    ("preload, 0 workers (synthetic default)", ["data.preload=true", "data.num_workers=0"]),
    ("0 workers", ["data.preload=false", "data.num_workers=0"]),
    ("1 worker", ["data.preload=false", "data.num_workers=1"]),
    ("2 workers", ["data.preload=false", "data.num_workers=2"]),
    ("4 workers (csv/singmos default)", ["data.preload=false", "data.num_workers=4"]),
]


def clips_per_second(batches: Iterable[dict], step: Callable[[dict], None] | None = None) -> float:
    """Clips/s of iterating over `batches` (passing each to `step`, if given)."""
    clips, start = 0, time.perf_counter()
    for batch in batches:
        if step is not None:
            step(batch)
        clips += len(batch["mos"])
    return clips / (time.perf_counter() - start)


def training_step(cfg: DictConfig) -> Callable[[dict], None]:
    """The bare training step (see `overhead.py`) of the model `cfg` describes."""
    L.seed_everything(cfg.seed, verbose=False)
    _, module = build(cfg)
    module.predictor.train()
    return bare_step(module, module.configure_optimizers(), cfg.trainer.gradient_clip_val)


def measure(args: argparse.Namespace, pitch: bool, cache: str) -> dict[str, list[float]]:
    """Per-round clips/s of every loader, consumer and fed step, with the pitch branch on or off."""
    pitch_overrides = ["model.pitch=midi", f"f0.cache_dir={cache}"] if pitch else []

    def config(backbone: str, overrides: list[str]) -> DictConfig:
        return compose_config(args.corpus, backbone, args.layers, args.width, [*pitch_overrides, *overrides])

    loaders: dict[str, DataLoader] = {}
    for name, overrides in LOADERS:
        loaders[name] = build(config("logmel", overrides))[0].train_dataloader()
        # An untimed epoch starts the (persistent) workers; the first loader built (preload) has
        # filled the f0 cache, so every timed epoch reads f0 from the warm cache.
        batches = list(loaders[name])
    logmel = training_step(config("logmel", []))
    steps = {"log-mel step": (logmel, batches)}
    if not pitch:  # the wav2vec2 configuration has no pitch branch
        steps["wav2vec2 step"] = (training_step(config("wav2vec2", [])), batches[: args.w2v_steps])
    for step, timed in steps.values():
        clips_per_second(timed[:2], step)  # warm-up
    rates: dict[str, list[float]] = {key: [] for key in [*steps, *loaders, *(f"fed: {n}" for n in loaders)]}
    for _ in range(args.rounds):
        for key, (step, timed) in steps.items():
            rates[key].append(clips_per_second(timed, step))
        for name, loader in loaders.items():
            rates[name].append(clips_per_second(loader))
            rates[f"fed: {name}"].append(clips_per_second(loader, logmel))
    return rates


def main() -> None:
    """Print loader, consumer and fed clips/s and the loader/consumer ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="data/synthetic-seed0-clips14")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--w2v-steps", type=int, default=3, help="wav2vec2 timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (see overhead.py)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as cache:
        results = {pitch: measure(args, pitch, cache) for pitch in (False, True)}
    print(f"\n{args.rounds} rounds, {args.threads} thread(s) in the main process, medians, clips/s")
    for pitch, rates in results.items():
        median = {key: statistics.median(values) for key, values in rates.items()}
        consumers = [key for key in median if key.endswith(" step")]
        print(f"\npitch branch: {'midi (f0 from the warm cache)' if pitch else 'off'}")
        for key in consumers:
            print(f"  consumer {key:<38} {median[key]:>8.1f}")
        header = "".join(f" {'/ ' + key.split()[0]:>10}" for key in consumers)
        print(f"  {'loader':<47} {'clips/s':>8}{header} {'fed':>8}")
        for name, _ in LOADERS:
            ratios = "".join(f" {median[name] / median[key]:>9.1f}x" for key in consumers)
            print(f"  {name:<47} {median[name]:>8.1f}{ratios} {median['fed: ' + name]:>8.1f}")


if __name__ == "__main__":
    main()
