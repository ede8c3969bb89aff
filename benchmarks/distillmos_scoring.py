"""Zero-shot Distill-MOS scoring: `sqa-score` with a Distill-MOS export against the package's own CLI.

    .venv/bin/python benchmarks/distillmos_scoring.py [--clips 300] [--threads 1] [--workers 1]

`--clips` synthetic clips of 2-10 s (uniform lengths; 16 kHz 16-bit WAV: a harmonic voice with
vibrato, a syllable envelope and noise at a random level, so that the scores spread) are
written to a folder, and `sqa.models.distillmos.zero_shot_predictor()` is exported with
`export_predictor`. Each tool then scores the whole folder in its own subprocess, one after the
other, under the same number of torch threads (`OMP_NUM_THREADS=--threads`):

- sqa: `sqa-score --checkpoint <export> --output <csv> --device cpu --num-workers <N> <folder>`
  (export checked and loaded, headers read, files decoded in DataLoader workers, length-sorted
  batches of `--batch` clips whose 7.68 s crops go through the network together).
- package: the `distillmos` command-line tool (`distillmos <folder> -o <csv>`, its entry point
  `distillmos.sqa:command_line_inference`: one file at a time through its model). torchaudio 2.9
  decodes audio only through torchcodec and FFmpeg, which sqa does not install, so the tool runs
  with `torchaudio.load` answered by soundfile (the same float32 samples); nothing else changes.

Throughput is clips per wall-clock second of each subprocess (start-up included), their ratio is
sqa / package; peak memory is each subprocess's maximum resident set (`os.wait4`, as
`/usr/bin/time -v` reports it; sqa-score's decoding workers are its children and count in its
maximum, not in a sum). The largest difference between the two tools' scores is printed: they
must agree.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from sqa.exports.format import export_predictor
from sqa.models.distillmos import SAMPLE_RATE, zero_shot_predictor

VENV_BIN = Path(sys.executable).parent
# The package's CLI with torchaudio.load read by soundfile (see the module docstring).
PACKAGE_CLI = """
import sys
import soundfile
import torch
import torchaudio

def load(path, *args, **kwargs):
    data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    return torch.from_numpy(data.T.copy()), rate

torchaudio.load = load
from distillmos.sqa import command_line_inference
sys.argv = ["distillmos", *sys.argv[1:]]
command_line_inference()
"""


def voice(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """A sung-vowel-like clip (N,): harmonics of a gliding f0 with vibrato, syllables and noise."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    f0 = rng.uniform(110, 330) * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(0.1, 0.4) * t))
    phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.01 * np.sin(2 * np.pi * 5.5 * t))) / SAMPLE_RATE
    tone = sum(np.sin(k * phase) * rng.uniform(0.3, 1.0) / k for k in range(1, 16))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * rng.uniform(1.5, 4.0) * t) ** 2
    noise = 10 ** rng.uniform(-3.0, -0.7) * rng.standard_normal(t.size)
    wav = 0.3 * tone * envelope / np.abs(tone).max() + noise
    return (0.9 * wav / np.abs(wav).max()).astype(np.float32)


def write_clips(folder: Path, count: int, seed: int) -> float:
    """`count` clips of 2-10 s as 16 kHz 16-bit WAV files in `folder`; returns their total seconds."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for i in range(count):
        seconds = float(rng.uniform(2.0, 10.0))
        sf.write(folder / f"clip{i:04d}.wav", voice(seconds, rng), SAMPLE_RATE, subtype="PCM_16")
        total += seconds
    return total


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak resident memory (MiB) of `command` run to completion in a subprocess."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = process.stderr.read() if process.stderr else b""
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    # Popen must not wait for the child again: wait4 reaped it.
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{command[0]} exited with {process.returncode}: {stderr.decode()[-2000:]}")
    # ru_maxrss is in KiB on Linux.
    return elapsed, usage.ru_maxrss / 1024


def read_scores(path: Path, column: str) -> dict[str, float]:
    """{file name: score} of a CSV output (`column`: its score column)."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, skipinitialspace=True))
    first = next(iter(rows[0]))
    return {Path(row[first]).name: float(row[column]) for row in rows}


def main() -> None:
    """Print clips/s and peak memory of sqa-score and the distillmos CLI, and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads of both tools")
    parser.add_argument("--workers", type=int, default=1, help="sqa-score --num-workers")
    parser.add_argument("--batch", type=int, default=8, help="sqa-score --batch-size")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "clips"
        folder.mkdir()
        seconds = write_clips(folder, args.clips, args.seed)
        export = export_predictor(zero_shot_predictor(), Path(tmp) / "export", SAMPLE_RATE, [])
        sqa_csv, package_csv = Path(tmp) / "sqa.csv", Path(tmp) / "package.csv"
        sqa_command = [str(VENV_BIN / "sqa-score"), "--checkpoint", str(export), "--output", str(sqa_csv)]
        sqa_command += ["--device", "cpu", "--num-workers", str(args.workers)]
        sqa_command += ["--batch-size", str(args.batch), str(folder)]
        sqa_seconds, sqa_memory = timed(sqa_command, env)
        package_command = [sys.executable, "-c", PACKAGE_CLI, str(folder), "-o", str(package_csv)]
        package_seconds, package_memory = timed(package_command, env)
        sqa_scores = read_scores(sqa_csv, "score")
        package_scores = read_scores(package_csv, "DistillMOS")
    if sqa_scores.keys() != package_scores.keys():
        raise RuntimeError("the two tools scored different files")
    largest = max(abs(sqa_scores[k] - package_scores[k]) for k in sqa_scores)
    values = np.array(list(package_scores.values()))
    print(
        f"{args.clips} clips, {seconds / 60:.1f} min of audio (2-10 s each), {args.threads} torch thread(s), "
        f"sqa-score --num-workers {args.workers} --batch-size {args.batch}; scores {values.min():.2f}-"
        f"{values.max():.2f}, largest sqa - package difference {largest:.2e}"
    )
    print("| tool | wall time | clips/s | peak memory (max RSS) |")
    print("| --- | --- | --- | --- |")
    for name, wall, memory in (
        ("`sqa-score`, Distill-MOS export", sqa_seconds, sqa_memory),
        ("`distillmos` CLI (the package's)", package_seconds, package_memory),
    ):
        print(f"| {name} | {wall:.1f} s | {args.clips / wall:.2f} | {memory:.0f} MiB |")
    print(
        f"throughput sqa-score / distillmos: {package_seconds / sqa_seconds:.2f}x; "
        f"peak memory sqa-score / distillmos: {sqa_memory / package_memory:.2f}x"
    )


if __name__ == "__main__":
    main()
