"""wav2vec2-large training step on a GPU: step time, clips/s and peak memory per variant.

    .venv/bin/python benchmarks/gpu.py [--batch 15] [--seconds 5] [--steps 10] [--warmup 3]
    .venv/bin/python benchmarks/gpu.py --device cpu --variants plain,checkpointing --steps 1 --warmup 0 ...

(the second, with `--batch 1 --seconds 1`, is a smoke test without a GPU: about a minute on a CPU).

The paper's setting: the wav2vec2-large (LV-60k) architecture through sqa's torchaudio backbone
class (`conf/model/backbone/torchaudio_wav2vec2_large.yaml`, random init, frozen feature encoder)
in the default `MOSPredictor`, margin L1 loss, SGD (lr 1e-3, momentum 0.9), gradient clipping 1.0,
on `--batch` clips of `--seconds` s, under bf16 autocast (what the trainer's default
`bf16-mixed` precision runs; fp16 autocast on GPUs without bf16). Variants, each on a fresh model
with the same weights and batch: `plain`; `checkpointing` (`gradient_checkpointing=true`:
every transformer layer recomputed in the backward pass); `compile` (`predictor.compile()`, as
`compile=true` does; its first steps compile, so keep `--warmup` >= 2 for it). Reported: the
median step time (forward, backward, clipping, optimizer step, synchronised) over `--steps` steps
after `--warmup`, clips/s, and `torch.cuda.max_memory_allocated` (weights, optimizer state and
activations). Without a CUDA GPU it says so and exits with code 0; `--device cpu` runs the same
code on the CPU (no autocast, no memory figure) as a smoke test of the model building and step.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import sqa  # noqa: F401  (registers the ${sqa_precision:} resolver the config uses)

CONF = Path(__file__).resolve().parents[1] / "conf"
VARIANTS = ("plain", "checkpointing", "compile")


def run_variant(variant: str, args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    """Median step time (s), clips/s and peak allocated memory (GiB; NaN off CUDA) of `variant`."""
    overrides = [
        "model/backbone=torchaudio_wav2vec2_large",
        f"model.backbone.gradient_checkpointing={variant == 'checkpointing'}",
    ]
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    torch.manual_seed(0)
    predictor = instantiate(cfg.model, num_domains=1).to(device).train()
    if variant == "compile":
        predictor.compile()
    loss_fn = instantiate(cfg.loss)
    params = [p for p in predictor.parameters() if p.requires_grad]
    optimizer = instantiate(cfg.optim)(params)
    generator = torch.Generator().manual_seed(0)
    samples = int(args.seconds * 16000)
    wav = (0.1 * torch.randn(args.batch, samples, generator=generator)).to(device)
    lengths = torch.full((args.batch,), samples, device=device)
    mos = (1 + 4 * torch.rand(args.batch, generator=generator)).to(device)
    dtype = torch.bfloat16 if device.type != "cuda" or torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=device.type == "cuda"):
            loss = loss_fn(predictor(wav, lengths), mos)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.trainer.gradient_clip_val)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    step = statistics.median(times[args.warmup :])
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    del predictor, optimizer, params
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()
    return {"step": step, "clips": args.batch / step, "peak": peak, "first": times[0]}


def main() -> int:
    """Run every variant and print its figures; exit code 0 also when there is no GPU."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--batch", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("No CUDA GPU found: nothing measured. (`--device cpu` runs the same steps as a smoke test.)")
        return 0
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"wav2vec2-large, batch {args.batch} x {args.seconds:g} s, {where}, median of {args.steps} steps")
    print(f"{'variant':<14} {'step s':>8} {'clips/s':>8} {'peak GiB':>9} {'first step s':>13}")
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            raise SystemExit(f"unknown variant {variant!r}; choose from {VARIANTS}")
        r = run_variant(variant, args, device)
        print(f"{variant:<14} {r['step']:>8.3f} {r['clips']:>8.2f} {r['peak']:>9.2f} {r['first']:>13.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
