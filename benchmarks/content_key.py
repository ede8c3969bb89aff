"""The frame cache's key of a step's clips: XXH3 (sqa's `content_key`) against BLAKE2b and SHA-256.

    .venv/bin/python benchmarks/content_key.py [--clips 8] [--seconds 11] [--repeats 50]
        [--rounds 3] [--hogs 2]

A frozen phase looks up every clip of every step in the frame cache by a digest of its samples
(`sqa.core.content_key`): `--clips` clips of `--seconds` s at 16 kHz (float32) a step, a
Distill-MOS candidate's batch of whole clips of that length. Each digest keys them `--repeats` times,
on the machine as it is (`idle`) and beside `--hogs` processes that each keep a core busy
(`busy`); digests and loads alternate over `--rounds` rounds. Printed: the median milliseconds a
step's keys take with each, and each one's ratio to XXH3 under the same load.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable

import numpy as np
import torch
from candidates import alternated

from sqa.core.content_key import content_key


def _blake2b(samples: torch.Tensor) -> bytes:
    """The key as sqa computed it before: BLAKE2b of a copy of the bytes and the dtype."""
    data = samples.contiguous().numpy().tobytes()
    return hashlib.blake2b(data + str(samples.dtype).encode(), digest_size=16).digest()


def _sha256(samples: torch.Tensor) -> bytes:
    """SHA-256 of the bytes in place and the dtype, cut to 16 bytes."""
    digest = hashlib.sha256(samples.contiguous().numpy())
    digest.update(str(samples.dtype).encode())
    return digest.digest()[:16]


DIGESTS: dict[str, Callable[[torch.Tensor], bytes]] = {
    "xxh3 (content_key)": content_key,
    "blake2b (before)": _blake2b,
    "sha256": _sha256,
}


def step_ms(digest: Callable[[torch.Tensor], bytes], clips: torch.Tensor, repeats: int) -> float:
    """Milliseconds `digest` takes to key every row of `clips` (C, N), the mean over `repeats`."""
    start = time.perf_counter()
    for _ in range(repeats):
        for row in clips:
            digest(row)
    return 1000 * (time.perf_counter() - start) / repeats


def main() -> None:
    """Command line: time every digest idle and busy, print the medians and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=11.0)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    clips = torch.from_numpy(rng.standard_normal((args.clips, int(16000 * args.seconds)), dtype=np.float32))
    median = alternated(
        args.rounds, args.hogs, DIGESTS, lambda name: step_ms(DIGESTS[name], clips, args.repeats)
    )
    print(f"{args.clips} clips of {args.seconds:g} s a step, {args.hogs} busy processes beside `busy`")
    print("| load | digest | ms a step | this / xxh3 |")
    print("|---|---|---|---|")
    for (load, name), value in median.items():
        print(f"| {load} | {name} | {value:.2f} | {value / median[(load, 'xxh3 (content_key)')]:.1f} |")


if __name__ == "__main__":
    main()
