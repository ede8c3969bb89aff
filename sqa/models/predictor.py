"""MOSPredictor: backbone frames -> per-frame SSL-MOS head -> pooling -> clip scores.

The head works on the paper's 1-5 MOS scale (its `2·tanh+3` range clip, the losses' margins and
the optimiser's learning rate are set for it). A corpus rated on another scale (`score_range`,
e.g. MUSHRA's 0-100) is mapped linearly onto 1-5 for training (`to_internal`) and predictions
are mapped back (`to_scale`) wherever they leave the model; on 1-5 both maps are the identity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from sqa.core.masking import frame_mask, masked_mean, repeat_last_mean
from sqa.core.prediction import OVERALL, Prediction
from sqa.models.branches import PITCH_BRANCHES, DomainEmbedding
from sqa.models.config import Exportable

# How frame scores become a clip score. "masked_mean": the mean over the clip's own frames (sqa's
# default). "s3prl_padded_mean": the mean over s3prl's `S3PRLUpstream` output, ceil(N / hop)
# frames where the last real frame repeats, as the SingMOS and SHEET predictors average it
# (their imports use it, so they score as their authors' code does). Both are per clip.
POOLINGS = ("masked_mean", "s3prl_padded_mean")


@dataclass
class PredictorConfig:
    """What rebuilds a `MOSPredictor` around its backbone: the head and branch settings."""

    head_dim: int
    dropout: float
    range_clip: bool
    num_domains: int
    domain_dim: int | None
    pitch: str | None
    pitch_dim: int
    dimensions: list[str]
    num_judges: int
    judge_dim: int | None
    score_range: list[float]
    pooling: str


# The scale the head predicts on: the paper's MOS scale.
INTERNAL_RANGE = (1.0, 5.0)
# The widths a rating scale may have (1-5 is 4 wide, MUSHRA's 0-100 is 100).
MIN_RANGE_WIDTH, MAX_RANGE_WIDTH = 1e-3, 1e6


class RatingScale:
    """Mixin: a family's rating scale `score_range` mapped linearly onto the internal 1-5 scale and back.

    A family on another scale than 1-5 calls `set_score_range` in its constructor. `start_at` (the
    train-mean head start) is refused here; a family with a head to set overrides it.
    """

    score_range: tuple[float, float] = INTERNAL_RANGE
    # y_internal = scale_offset + scale_gain · y on `score_range` (1-5: the identity).
    scale_gain: float = 1.0
    scale_offset: float = 0.0

    def set_score_range(self, score_range: Sequence[float]) -> list[float]:
        """Check `score_range` [low, high] and map it onto the internal scale; returns it as floats."""
        low, high = (float(v) for v in score_range)
        # Finite ends of a sane width: the maps to and from the internal scale stay finite and exact.
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(
                f"score_range must be [low, high] with low < high, both finite, got {list(score_range)}"
            )
        if not (
            MIN_RANGE_WIDTH <= high - low <= MAX_RANGE_WIDTH and max(abs(low), abs(high)) <= MAX_RANGE_WIDTH
        ):
            raise ValueError(
                f"score_range must be {MIN_RANGE_WIDTH:g} to {MAX_RANGE_WIDTH:g} wide with ends within "
                f"±{MAX_RANGE_WIDTH:g}, got {list(score_range)}"
            )
        self.score_range = (low, high)
        self.scale_gain = (INTERNAL_RANGE[1] - INTERNAL_RANGE[0]) / (high - low)
        self.scale_offset = INTERNAL_RANGE[0] - low * self.scale_gain
        return [low, high]

    def to_internal(self, values: torch.Tensor) -> torch.Tensor:
        """Labels (any shape) on `score_range` mapped linearly onto the internal 1-5 scale."""
        if self.scale_gain == 1.0 and self.scale_offset == 0.0:
            return values
        return values * self.scale_gain + self.scale_offset

    def to_scale(self, values: torch.Tensor) -> torch.Tensor:
        """Scores (any shape) of the internal 1-5 scale mapped linearly onto `score_range`."""
        if self.scale_gain == 1.0 and self.scale_offset == 0.0:
            return values
        return (values - self.scale_offset) / self.scale_gain

    def spread_to_scale(self, spread: torch.Tensor) -> torch.Tensor:
        """Spreads (any shape) on the internal 1-5 scale mapped onto `score_range` (a width, no offset)."""
        return spread / self.scale_gain

    def start_at(self, scores: Sequence[float]) -> None:
        """Refused: a family without a head trained from scratch starts from its own score instead."""
        raise ValueError(
            f"head_init=train_mean does not apply to {type(self).__name__}, which starts from its own "
            "score: use head_init=random"
        )


class MOSPredictor(RatingScale, Exportable, nn.Module):
    """SSL-MOS predictor: backbone frames [+ domain embedding] [+ pitch branch] -> per-frame head.

    `domain_dim` (None: off) embeds the domain ID (one of `num_domains`) and concatenates it to
    every frame; `pitch` ("midi", "histogram", "intonation" or None) adds a pitch branch fed with f0.
    `dimensions` names the scores predicted by one output each of the head's last layer (the
    overall "mos" first, then e.g. "lyrics", "melody"). `judge_dim` (None: off) embeds the
    judge ID (one of `num_judges`, plus a learned mean judge at index `num_judges`, the one used
    when no judge is given) and concatenates it to every frame. `score_range` is the corpus's
    rating scale: `forward` scores on the internal 1-5 scale, `to_scale` maps them onto it.
    `pooling` (one of `POOLINGS`) turns frame scores into the clip's scores.
    """

    exported_children = ("backbone",)

    def __init__(
        self,
        backbone: nn.Module,
        head_dim: int = 64,
        dropout: float = 0.3,
        range_clip: bool = True,
        num_domains: int = 1,
        domain_dim: int | None = None,
        pitch: str | None = None,
        pitch_dim: int = 128,
        dimensions: Sequence[str] = (OVERALL,),
        num_judges: int = 0,
        judge_dim: int | None = None,
        score_range: Sequence[float] = INTERNAL_RANGE,
        pooling: str = "masked_mean",
    ) -> None:
        super().__init__()
        dimensions = list(dimensions)
        scale = self.set_score_range(score_range)
        if not dimensions or dimensions[0] != OVERALL or len(set(dimensions)) != len(dimensions):
            raise ValueError(
                f"dimensions must be distinct and start with {OVERALL!r} (the overall score that "
                f"checkpoints are selected on), got {dimensions}"
            )
        if pitch is not None and pitch not in PITCH_BRANCHES:
            raise ValueError(f"pitch must be null or one of {sorted(PITCH_BRANCHES)}, got {pitch!r}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.backbone = backbone
        self.range_clip = range_clip
        self.pooling = pooling
        self.config = PredictorConfig(
            head_dim,
            dropout,
            range_clip,
            num_domains,
            domain_dim,
            pitch,
            pitch_dim,
            dimensions,
            num_judges,
            judge_dim,
            scale,
            pooling,
        )
        self.dimensions = dimensions
        self.num_judges = num_judges
        self.domain = DomainEmbedding(num_domains, domain_dim) if domain_dim else None
        self.pitch = PITCH_BRANCHES[pitch](pitch_dim) if pitch else None
        # The extra last row is the mean judge, trained on clips' mean scores.
        self.judge = DomainEmbedding(num_judges + 1, judge_dim) if judge_dim else None
        branches = (self.domain, self.pitch, self.judge)
        in_dim = backbone.output_dim + sum(m.output_dim for m in branches if m is not None)
        self.head = nn.Sequential(
            nn.Linear(in_dim, head_dim),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(head_dim, len(dimensions)),
        )

    @property
    def domain_count(self) -> int | None:
        """How many domains the model scores differently (its domain embedding's); None: no domain IDs."""
        return None if self.domain is None else self.domain.embedding.num_embeddings

    @torch.no_grad()
    def start_at(self, scores: Sequence[float]) -> None:
        """Make every clip score `scores` (one per dimension, on `score_range`) until training moves it.

        The head's last layer gets zero weights and the bias that yields the scores (through the
        range clip where there is one), so training starts from the constant predictor instead of
        a random function of the frames; the layer's weights then learn from the first step on.
        """
        if len(scores) != len(self.dimensions):
            raise ValueError(
                f"start_at needs {len(self.dimensions)} scores (one per dimension), got {len(scores)}"
            )
        target = self.to_internal(torch.tensor([float(v) for v in scores], dtype=torch.float64))
        if self.range_clip:
            # 2·tanh(b)+3 = target, kept off the clip's asymptotes.
            low, high = INTERNAL_RANGE
            target = torch.atanh(((target.clamp(low + 0.01, high - 0.01)) - 3.0) / 2.0)
        last = self.head[-1]
        last.weight.zero_()
        last.bias.copy_(target.to(last.bias))

    def forward(
        self,
        wav: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """Score a padded batch: wav (B, N), lengths (B,), domain (B,) IDs, f0 (B, T') in Hz.

        judge (B,) IDs in [0, num_judges]; None scores as the mean judge (index num_judges).
        Scores are on the internal 1-5 scale: `to_scale` maps them onto `score_range`.
        """
        frames, frame_lengths = self.backbone(wav, lengths)
        return self.score_frames(frames, frame_lengths, lengths, domain, f0, judge)

    def score_frames(
        self,
        frames: torch.Tensor,
        frame_lengths: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """Score backbone frames (B, T, D) with frame_lengths (B,) of clips of `lengths` samples (B,).

        `forward` after the backbone: a frozen backbone's frames can be computed once and reused
        (`sqa.training.frame_cache`). Frames past a clip's frame length are ignored.
        """
        features = self.head_input(frames, frame_lengths, domain, f0, judge)
        return self.score_features(features, frame_lengths, lengths)

    def head_input(
        self,
        frames: torch.Tensor,
        frame_lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Backbone frames (B, T, D) with the branches' embeddings appended: the head's input (B, T, D')."""
        parts = [frames]
        if self.domain is not None:
            if domain is None:
                raise ValueError("this predictor uses domain IDs: pass domain (B,)")
            parts.append(self.domain(domain, frames.shape[1]).to(frames.dtype))
        if self.pitch is not None:
            if f0 is None:
                raise ValueError(f"this predictor has a {self.config.pitch} branch: pass f0 (B, T')")
            parts.append(self.pitch(f0, frame_lengths, frames.shape[1]).to(frames.dtype))
        if self.judge is not None:
            if judge is None:
                judge = torch.full((frames.shape[0],), self.num_judges, device=frames.device)
            parts.append(self.judge(judge, frames.shape[1]).to(frames.dtype))
        return torch.cat(parts, dim=-1)

    def score_features(
        self, features: torch.Tensor, frame_lengths: torch.Tensor, lengths: torch.Tensor
    ) -> Prediction:
        """The head over `head_input` features (B, T, D'), pooled per clip into a `Prediction`."""
        frame_scores = self.head(features)
        if self.range_clip:
            # Keeps every frame inside the internal 1..5 scale (`score_range` once mapped back).
            frame_scores = 2.0 * torch.tanh(frame_scores) + 3.0
        mask = frame_mask(frame_lengths, frame_scores.shape[1])
        frame_scores = frame_scores.masked_fill(~mask[:, :, None], 0.0)
        if self.pooling == "s3prl_padded_mean":
            # s3prl's frame count for a clip of N samples: ceil(N / hop), from the clip's samples.
            hop = self.backbone.hop_length
            counts = torch.div(lengths.to(frame_lengths.device) + hop - 1, hop, rounding_mode="floor")
            scores = repeat_last_mean(frame_scores, frame_lengths, counts.clamp_min(1))
        else:
            scores = masked_mean(frame_scores, frame_lengths)
        return Prediction(scores[:, 0], frame_scores[:, :, 0], frame_lengths, scores, frame_scores)
