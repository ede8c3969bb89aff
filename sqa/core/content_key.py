"""The key that caches of computed outputs look a tensor's samples up by: a digest of its bytes and dtype.

Two tensors get the same key exactly when they hold the same values of the same dtype, wherever
they are (the bytes are read on the CPU), so a clip or a segment cut from a padded batch finds
what was computed for it alone. The digest is XXH3's 128 bits: a frozen phase keys every clip
of every step, and XXH3 reads a clip many times as fast as BLAKE2b or SHA-256
(`benchmarks/content_key.py`). It is no cryptographic hash, and needs none: the keys stay in
one process's memory, and two different clips share one by chance only among about 2^64 clips.
"""

from __future__ import annotations

import torch
import xxhash


def content_key(samples: torch.Tensor) -> bytes:
    """A 16-byte digest of a tensor's values (any shape) and dtype."""
    digest = xxhash.xxh3_128(samples.detach().to("cpu").contiguous().numpy())
    digest.update(str(samples.dtype).encode())
    return digest.digest()
