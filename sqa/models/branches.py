"""Optional per-frame inputs to the SSL-MOS head: domain-ID embedding and pitch branches."""

from __future__ import annotations

import torch
from torch import nn

from sqa.core.masking import frame_mask
from sqa.models.pitch_features import (
    HIST_BINS,
    align_frames,
    intonation,
    midi_notes,
    midi_variance,
    pitch_histogram,
)


class DomainEmbedding(nn.Module):
    """An ID (B,) (domain, i.e. annotation batch, or judge) -> embedding tiled over time (B, T, dim)."""

    def __init__(self, num_domains: int, dim: int = 128) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_domains, dim)
        self.output_dim = dim

    def forward(self, domain: torch.Tensor, num_frames: int) -> torch.Tensor:
        """Domain (B,) long -> (B, num_frames, dim)."""
        return self.embedding(domain)[:, None, :].expand(-1, num_frames, -1)


class MidiPitchBranch(nn.Module):
    """MIDI note (Embedding(128, dim)) and note variance (Embedding(256, dim)) per frame."""

    def __init__(self, dim: int = 128) -> None:
        super().__init__()
        self.note = nn.Embedding(128, dim)
        self.variance = nn.Embedding(256, dim)
        self.output_dim = 2 * dim

    def forward(self, f0: torch.Tensor, frame_lengths: torch.Tensor, num_frames: int) -> torch.Tensor:
        """f0 (B, T') Hz -> (B, num_frames, 2·dim), aligned to the backbone's frames."""
        notes = midi_notes(align_frames(f0, num_frames))
        return torch.cat([self.note(notes), self.variance(midi_variance(notes))], dim=-1)


class HistogramBranch(nn.Module):
    """Clip pitch histogram (120 bins) -> Linear(120, dim), tiled over time."""

    def __init__(self, dim: int = 128) -> None:
        super().__init__()
        self.linear = nn.Linear(HIST_BINS, dim)
        self.output_dim = dim

    def forward(self, f0: torch.Tensor, frame_lengths: torch.Tensor, num_frames: int) -> torch.Tensor:
        """f0 (B, T') Hz -> (B, num_frames, dim); the histogram covers each clip's valid frames."""
        hist = pitch_histogram(align_frames(f0, num_frames), frame_lengths)
        return self.linear(hist)[:, None, :].expand(-1, num_frames, -1)


class IntonationBranch(nn.Module):
    """Per-frame intonation (offset from the 12-tone grid) -> Conv1d over ~0.3 s -> (B, T, dim).

    The MIDI branch rounds f0 to whole notes, so it cannot hear a voice singing 40 cents flat;
    the convolution spans about a vibrato cycle (15 frames of 20 ms), so the offset it sees is
    the note's centre rather than the vibrato's swing. Frames past a clip's end hold f0 = 0, like
    the convolution's own zero padding, so a clip scores alike alone and in a padded batch.
    """

    def __init__(self, dim: int = 128, kernel: int = 15) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, dim, kernel, padding=kernel // 2)
        self.output_dim = dim

    def forward(self, f0: torch.Tensor, frame_lengths: torch.Tensor, num_frames: int) -> torch.Tensor:
        """f0 (B, T') Hz -> (B, num_frames, dim), aligned to the backbone's frames."""
        f0 = align_frames(f0, num_frames)
        # Zero past each clip's frames, whatever the batch's f0 padding held.
        f0 = f0 * frame_mask(frame_lengths, num_frames).to(f0.dtype)
        return torch.relu(self.conv(intonation(f0).transpose(1, 2))).transpose(1, 2)


PITCH_BRANCHES = {"midi": MidiPitchBranch, "histogram": HistogramBranch, "intonation": IntonationBranch}
