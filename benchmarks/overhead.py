"""Framework overhead: sqa's Lightning training step against a bare PyTorch loop, as a time ratio.

    .venv/bin/python benchmarks/overhead.py [--corpus data/synthetic-seed0-clips14] [--rounds 3]

Both loops train the same `MOSPredictor` with the same loss, SGD optimiser and gradient clipping,
all built by `sqa.training.builder.build` from `conf/train.yaml`, on CPU in fp32, over the same batches:

- sqa: the `MOSModule` in a `lightning.Trainer` made from `conf/trainer/default.yaml` (with the
  progress bar of `sqa.training.run.run`, `log_every_n_steps`, the default CSV logger), fed by
  `MOSDataModule`'s own training loader, which crops and collates every batch as it goes.
- bare: `zero_grad; loss(predictor(...)).backward(); clip_grad_norm_; step` over the same
  batches, collated beforehand and kept in memory.

Two models: the default log-mel model with the default data settings (batch 8, clips up to
10 s), and a random-init wav2vec2-base-shaped model (`--layers` x `--width` transformer,
512-channel convolutional front end, frozen as in fine-tuning) on `--batch` clips cropped to
`--seconds`.

What is timed: the wall time from the end of the last warm-up step to the end of the last step,
taken in `on_train_batch_end` for Lightning and after `optimizer.step()` for the bare loop. So
everything Lightning does between two steps (fetching and collating the batch, hooks, logging,
the progress bar) counts, and its one-off setup and teardown do not. Validation is disabled
(`limit_val_batches=0`) rather than timed around: it runs the same forward in both loops, every
`val_check_interval` steps, so it is not a per-step cost of the framework; the checkpoint
callbacks of `sqa.training.run.run` act only after validation and at epoch ends, so they are left
out too, and the timed steps stay inside the first epoch (the same batches in both loops). The
two loops alternate for `--rounds` rounds; the figures are medians over rounds.

Torch runs `--threads` intra-op threads (default 1): on a shared, oversubscribed machine, idle
OpenMP threads spinning at barriers made steps 5-20x slower and the ratios meaningless.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig

from sqa.training.builder import build
from sqa.training.lit_module import MOSModule
from sqa.training.run_callbacks import progress_bar

CONF = Path(__file__).resolve().parents[1] / "conf"


def compose_config(corpus: str, backbone: str, layers: int, width: int, overrides: list[str]) -> DictConfig:
    """`conf/train.yaml` on `corpus` with the log-mel ("logmel") or a wav2vec2 ("wav2vec2") backbone.

    The wav2vec2 is the "tiny" torchaudio arch widened to wav2vec2-base's shape: 512-channel
    convolutions, `layers` transformer layers of `width` dims, 64-dim heads, 4x feed-forward.
    """
    overrides = [f"data.corpus.root={corpus}", *overrides]
    if backbone == "wav2vec2":
        overrides += ["model/backbone=tiny_wav2vec2", "model.backbone.freeze_feature_encoder=true"]
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    if backbone == "wav2vec2":
        cfg.model.backbone.arch_kwargs = {
            "extractor_conv_layer_config": [[512, 10, 5]] + [[512, 3, 2]] * 4 + [[512, 2, 2]] * 2,
            "encoder_embed_dim": width,
            "encoder_num_layers": layers,
            "encoder_num_heads": width // 64,
            "encoder_ff_interm_features": 4 * width,
        }
    return cfg


def bare_step(module: MOSModule, optimizer: torch.optim.Optimizer, clip: float) -> Callable[[dict], None]:
    """One plain PyTorch training step of `module.predictor` with `module.loss`, clipped to `clip`."""
    params = [p for p in module.predictor.parameters() if p.requires_grad]

    def step(batch: dict[str, Any]) -> None:
        optimizer.zero_grad(set_to_none=True)
        out = module.predictor(batch["wav"], batch["lengths"], batch["domain"], batch["f0"])
        module.loss(out, batch["mos"]).backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()

    return step


def bare_seconds(step: Callable[[dict], None], batches: list[dict], warmup: int) -> float:
    """Seconds `step` takes over `batches[warmup:]`, after running it on `batches[:warmup]`."""
    for batch in batches[:warmup]:
        step(batch)
    start = time.perf_counter()
    for batch in batches[warmup:]:
        step(batch)
    return time.perf_counter() - start


class StepTimer(L.Callback):
    """Records the time at the end of every training step."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        """Note the end of a step (after the optimizer step)."""
        self.ends.append(time.perf_counter())


def lightning_seconds(
    cfg: DictConfig, module: MOSModule, datamodule: L.LightningDataModule, steps: int, warmup: int
) -> float:
    """Seconds a default-configured Trainer takes for steps warmup+1 .. warmup+steps."""
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as run_dir:
        trainer: L.Trainer = instantiate(
            cfg.trainer,
            max_steps=warmup + steps,
            limit_val_batches=0,
            callbacks=[timer, *progress_bar(cfg)],
            logger=instantiate(cfg.logger, save_dir=run_dir),
            enable_checkpointing=False,
            enable_model_summary=False,
            default_root_dir=run_dir,
        )
        trainer.fit(module, datamodule=datamodule)
    return timer.ends[-1] - timer.ends[warmup - 1]


def measure(cfg: DictConfig, steps: int, warmup: int, rounds: int) -> dict[str, float]:
    """Median steps/s of the sqa and the bare loop, and the median per-round time ratio."""
    L.seed_everything(cfg.seed, verbose=False)
    datamodule, module = build(cfg)
    loader = datamodule.train_dataloader()
    steps = min(steps, len(loader) - warmup)
    batches = [batch for batch, _ in zip(loader, range(warmup + steps), strict=False)]
    step = bare_step(module, module.configure_optimizers(), cfg.trainer.gradient_clip_val)
    bare, sqa = [], []
    for _ in range(rounds):
        module.predictor.train()
        bare.append(bare_seconds(step, batches, warmup))
        sqa.append(lightning_seconds(cfg, module, datamodule, steps, warmup))
    return {
        "steps": steps,
        "params": sum(p.numel() for p in module.predictor.parameters()),
        "bare": steps / statistics.median(bare),
        "sqa": steps / statistics.median(sqa),
        "ratio": statistics.median(s / b for s, b in zip(sqa, bare, strict=True)),
    }


def main() -> None:
    """Run the benchmark for each model and print steps/s and the sqa/bare time ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="data/synthetic-seed0-clips14")
    parser.add_argument("--models", default="logmel,wav2vec2")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--batch", type=int, default=4, help="wav2vec2 batch size")
    parser.add_argument("--seconds", type=float, default=2.0, help="wav2vec2 crop length")
    parser.add_argument("--steps", type=int, default=50, help="log-mel timed steps per round")
    parser.add_argument("--w2v-steps", type=int, default=7, help="wav2vec2 timed steps per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for model in args.models.split(","):
        if model == "wav2vec2":
            data = [f"data.batch_size={args.batch}", f"data.max_train_seconds={args.seconds}"]
            cfg = compose_config(args.corpus, model, args.layers, args.width, data)
            name = f"wav2vec2 {args.layers}x{args.width}, {args.batch} x {args.seconds:g} s"
            result = measure(cfg, args.w2v_steps, args.warmup, args.rounds)
        else:
            cfg = compose_config(args.corpus, model, args.layers, args.width, [])
            name = f"log-mel (default), {cfg.data.batch_size} x <={cfg.data.max_train_seconds:g} s"
            result = measure(cfg, args.steps, args.warmup, args.rounds)
        rows.append((name, result))
    print(f"\n{args.rounds} rounds, {args.threads} thread(s), medians; ratio = sqa / bare step time")
    print(f"{'model':<34} {'params':>7} {'steps':>5} {'bare steps/s':>12} {'sqa steps/s':>11} {'ratio':>6}")
    for name, r in rows:
        print(
            f"{name:<34} {r['params'] / 1e6:>6.1f}M {r['steps']:>5} {r['bare']:>12.3g} {r['sqa']:>11.3g} "
            f"{r['ratio']:>5.3f}x"
        )


if __name__ == "__main__":
    main()
