"""Distill-MOS's fixed 7.68 s segments of a clip: tiling it for its frames, and the package's own crops.

The network reads segments of exactly `SEGMENT` samples at 16 kHz; a clip of any length is cut
into such segments from its own samples, silence past its end.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from sqa.models.backbone import W2V_HOP, W2V_WINDOW, conv_frame_lengths

# One segment: 7.68 s, 384 frames of 320 samples.
SEGMENT = 122880
SEGMENT_FRAMES = SEGMENT // W2V_HOP
# The package's crops of a long clip: consecutive crops start at most this many samples apart.
CROP_HOP = 16000


def segment_starts(samples: int) -> list[int]:
    """Start samples of the 7.68 s segments that tile a clip of `samples` samples for its frames.

    The clip has `conv_frame_lengths` frames (wav2vec2's count at the same 320-sample hop).
    Segment k < K-1 starts at k · 7.68 s and gives frames [384·k, 384·(k+1)); the last one
    gives the rest and ends with the clip (its start a multiple of 320 samples, so its frames
    fall on the clip's grid), so that it holds audio rather than silence wherever the clip is
    long enough. A clip shorter than a segment gets one, padded with silence as the package pads.
    """
    frames = int(conv_frame_lengths(torch.tensor(max(samples, W2V_WINDOW))))
    count = math.ceil(frames / SEGMENT_FRAMES)
    last = min((count - 1) * SEGMENT, max(0, (samples - SEGMENT) // W2V_HOP * W2V_HOP))
    return [k * SEGMENT for k in range(count - 1)] + [last]


def crop_starts(samples: int) -> list[int]:
    """Start samples of the package's own crops of a clip of `samples` samples (its zero-shot score).

    A clip up to 7.68 s is one crop (padded with silence); a longer one gets crops spread evenly
    from its start to its end, at most 1 s apart, the starts rounded down as the package rounds.
    """
    over = samples - SEGMENT
    if over <= 0:
        return [0]
    count = math.ceil(over / CROP_HOP) + 1
    return [int(c * over) for c in np.linspace(0.0, 1.0, count)]


def cut_segments(wav: torch.Tensor, lengths: torch.Tensor, starts: list[list[int]]) -> torch.Tensor:
    """Segments (S, SEGMENT) of each clip b at `starts[b]`, from its own samples, silence past its end."""
    segments = []
    for row, (n, clip_starts) in enumerate(zip(lengths.tolist(), starts, strict=True)):
        for start in clip_starts:
            piece = wav[row, start : min(start + SEGMENT, n)]
            segments.append(nn.functional.pad(piece, (0, SEGMENT - piece.shape[0])))
    return torch.stack(segments)
