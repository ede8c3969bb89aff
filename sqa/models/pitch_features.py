"""The SingMOS-Pro pitch features, cheap functions of an f0 track computed where the model uses them.

- MIDI pitch: rint(69 + 12·log2(f0/440)) on voiced frames, 0 on unvoiced frames;
- MIDI pitch variance: v[0] = note[0], v[t] = note[t] − note[t−1] + 128;
- pitch histogram: voiced frames only, f0 rounded to integer Hz and clipped to [40, 799],
  cents = 1200·log2(f0/440), bin = floor((cents/10) mod 120), counts / number of voiced frames.

sqa adds intonation, which the paper does not have: per voiced frame, the offset d of the pitch
from the nearest note of the equal-tempered grid (A4 = 440 Hz), in semitones (−½ ≤ d < ½), as
(sin 2πd, cos 2πd), so that −½ and +½ (the same pitch) meet; unvoiced frames are (0, 0).
"""

from __future__ import annotations

import torch

from sqa.core.masking import frame_mask

HIST_BINS = 120
HIST_MIN_HZ, HIST_MAX_HZ = 40, 799


def align_frames(f0: torch.Tensor, num_frames: int) -> torch.Tensor:
    """Truncate or zero-pad f0 (B, T') to the backbone's frame count -> (B, num_frames)."""
    if f0.shape[1] >= num_frames:
        return f0[:, :num_frames]
    return torch.nn.functional.pad(f0, (0, num_frames - f0.shape[1]))


def midi_notes(f0: torch.Tensor) -> torch.Tensor:
    """MIDI note per frame (same shape as f0, long): rint(69 + 12·log2(f0/440)), 0 if unvoiced."""
    voiced = f0 > 0
    note = torch.round(69.0 + 12.0 * torch.log2(torch.where(voiced, f0, 440.0) / 440.0))
    return torch.where(voiced, note, 0.0).clamp(0, 127).long()


def midi_variance(notes: torch.Tensor) -> torch.Tensor:
    """Note differences (B, T): v[0] = note[0], v[t] = note[t] − note[t−1] + 128 (0..255)."""
    diff = notes[:, 1:] - notes[:, :-1] + 128
    return torch.cat([notes[:, :1], diff], dim=1)


def intonation(f0: torch.Tensor) -> torch.Tensor:
    """Offset from the nearest grid note per frame, f0 (B, T) Hz -> (B, T, 3): sin 2πd, cos 2πd, voiced."""
    voiced = f0 > 0
    semitones = 12.0 * torch.log2(torch.where(voiced, f0, 440.0) / 440.0)
    angle = 2.0 * torch.pi * (semitones - torch.round(semitones))
    mask = voiced.to(f0.dtype)
    return torch.stack([torch.sin(angle) * mask, torch.cos(angle) * mask, mask], dim=-1)


def pitch_histogram(f0: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Octave-folded 10-cent histogram (B, 120) of the voiced frames among the first `lengths`."""
    valid = frame_mask(lengths, f0.shape[1]) & (f0 > 0)
    hz = torch.round(f0).clamp(HIST_MIN_HZ, HIST_MAX_HZ)
    cents = 1200.0 * torch.log2(hz / 440.0)
    bins = torch.floor(torch.remainder(cents / 10.0, HIST_BINS)).long().clamp(0, HIST_BINS - 1)
    hist = torch.zeros(f0.shape[0], HIST_BINS, dtype=f0.dtype, device=f0.device)
    hist.scatter_add_(1, bins * valid, valid.to(f0.dtype))
    return hist / valid.sum(dim=1, keepdim=True).clamp_min(1).to(f0.dtype)
