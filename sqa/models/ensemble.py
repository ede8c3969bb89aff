"""EnsemblePredictor: several predictors scored as one, by a weighted sum of their scores.

The ensemble's score of dimension k is `intercept[k] + Σ_m weights[k][m] · score_m[k]`, on the
members' shared internal 1-5 scale (their common `to_scale` maps it onto the rating scale). The
mean ensemble has weights 1/M and no intercept; `sqa-ensemble --method ridge` fits them on the
members' validation predictions (`sqa.training.ensemble`). Frame scores combine alike, so a
clip scored in chunks gets the same weighted sum of its members' chunked scores. The ensemble
implements `sqa.models.interface.Predictor` (its members' rating scale, `start_at` refused), so it
loads and scores as any export.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sqa.core.prediction import Prediction
from sqa.models.config import Exportable
from sqa.models.interface import Predictor
from sqa.models.predictor import RatingScale

# The most members an ensemble holds: each is a whole predictor run on every clip.
MAX_MEMBERS = 32


@dataclass
class EnsembleConfig:
    """What an ensemble records beside its members: weights (K, M) and intercepts (K,), internal scale."""

    weights: list[list[float]]
    intercept: list[float]


class MemberBackbones:
    """What the scorer reads of a backbone, for members of several backbone classes.

    `min_samples` is the largest receptive field of any member (shorter clips are padded to it).
    """

    def __init__(self, min_samples: int, hop_length: int) -> None:
        self.min_samples = min_samples
        self.hop_length = hop_length


def member_mismatch(members: Sequence[Predictor]) -> tuple[int, str] | None:
    """(index, how) of the first member that cannot join member 0 in an ensemble, or None.

    Members must share the score dimensions, the rating scale (`score_range`) and the frame hop,
    so that their scores and frame scores add up clip by clip and frame by frame.
    """
    first = members[0]
    for i, member in enumerate(members[1:], start=1):
        if list(member.dimensions) != list(first.dimensions):
            return (
                i,
                f"scores the dimensions {list(member.dimensions)}, the first member {list(first.dimensions)}",
            )
        if tuple(member.score_range) != tuple(first.score_range):
            return i, (
                f"rates on {list(member.score_range)}, the first member on {list(first.score_range)}; an "
                "ensemble's "
                "members share one rating scale"
            )
        if member.backbone.hop_length != first.backbone.hop_length:
            return i, (
                f"has frames of {member.backbone.hop_length} samples, the first member of "
                f"{first.backbone.hop_length}; an ensemble's members share one frame rate"
            )
    return None


class EnsemblePredictor(RatingScale, Exportable, nn.Module):
    """A weighted sum of `members`' scores per dimension: `weights` (K, M), `intercept` (K,).

    `weights[k][m]` weighs member m's score of dimension k, both on the internal 1-5 scale; the
    members (predictors of `sqa.exports.targets.PREDICTOR_CLASSES`) are scored on the same batch,
    each with its own backbone, branches and pooling.
    """

    def __init__(
        self,
        members: Sequence[Predictor],
        weights: Sequence[Sequence[float]],
        intercept: Sequence[float],
    ) -> None:
        super().__init__()
        members = list(members)
        if not 2 <= len(members) <= MAX_MEMBERS:
            raise ValueError(f"an ensemble holds 2 to {MAX_MEMBERS} members, got {len(members)}")
        mismatch = member_mismatch(members)
        if mismatch is not None:
            raise ValueError(f"members[{mismatch[0]}] {mismatch[1]}")
        rows = [[float(w) for w in row] for row in weights]
        dimensions = len(members[0].dimensions)
        if len(rows) != dimensions or any(len(row) != len(members) for row in rows):
            raise ValueError(
                f"weights must be {dimensions} rows (one per score dimension) of {len(members)} "
                "(one per member)"
            )
        if len(intercept) != dimensions:
            raise ValueError(f"intercept must hold {dimensions} values (one per score dimension)")
        self.set_score_range(members[0].score_range)
        self.members = nn.ModuleList(members)
        self.config = EnsembleConfig(rows, [float(b) for b in intercept])
        # Not in the state_dict: config.yaml holds them, as plain numbers a reader can check.
        self.register_buffer("weights", torch.tensor(rows, dtype=torch.float32), persistent=False)
        self.register_buffer("intercept", torch.tensor(self.config.intercept), persistent=False)

    def export_config(self) -> dict[str, Any]:
        """Config rebuilding the ensemble: its members' configs, weights and intercepts."""
        return {
            "_target_": self.export_target(),
            "members": [m.export_config() for m in self.members],
            "weights": self.config.weights,
            "intercept": self.config.intercept,
        }

    @property
    def dimensions(self) -> list[str]:
        """The score dimensions every member predicts, the overall "mos" first."""
        return list(self.members[0].dimensions)

    @property
    def domain(self) -> nn.Module | None:
        """The domain embedding of fewest domains among the members (None: no member has one).

        The scorer reads its size: a domain index is valid only if every member embeds it.
        """
        embeddings = [m.domain for m in self.members if m.domain is not None]
        return min(embeddings, key=lambda d: d.embedding.num_embeddings, default=None)

    @property
    def domain_count(self) -> int | None:
        """The domains every member scores differently (the fewest a member has); None: no member has any."""
        counts = [m.domain_count for m in self.members if m.domain_count is not None]
        return min(counts, default=None)

    @property
    def backbone(self) -> nn.Module | MemberBackbones:
        """The backbone whose receptive field the scorer pads short clips to.

        Members of one backbone class: that member's backbone of the largest receptive field (its
        class names the chunked-scoring measurement); of several: a `MemberBackbones`.
        """
        backbones = [m.backbone for m in self.members]
        widest = max(backbones, key=lambda b: b.min_samples)
        if len({type(b) for b in backbones}) == 1:
            return widest
        return MemberBackbones(widest.min_samples, widest.hop_length)

    @property
    def pooling(self) -> str:
        """The members' pooling of frame scores, or "per member" where they differ."""
        poolings = {m.pooling for m in self.members}
        return poolings.pop() if len(poolings) == 1 else "per member"

    @pooling.setter
    def pooling(self, value: str) -> None:
        for member in self.members:
            member.pooling = value

    def forward(
        self,
        wav: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """Score a padded batch as `MOSPredictor.forward`: wav (B, N), lengths (B,), domain (B,), f0 (B, T').

        Each member takes the inputs it uses. Scores (B, K) and frame scores (B, T, K) are the
        weighted sums of the members' on the internal scale; members must agree on frame counts.
        """
        return self.combine([member(wav, lengths, domain, f0, judge) for member in self.members], lengths)

    def combine(self, outs: Sequence[Prediction], lengths: torch.Tensor) -> Prediction:
        """The ensemble's prediction from its members' `outs` on one batch of clips of `lengths` (B,) samples.

        A caller that has the members' predictions by another way (a frozen member's frames from a
        cache) combines them here exactly as `forward` does.
        """
        if len(outs) != len(self.members):
            raise ValueError(
                f"combine needs one prediction per member ({len(self.members)}), got {len(outs)}"
            )
        frame_lengths = outs[0].frame_lengths
        for i, out in enumerate(outs[1:], start=1):
            if not torch.equal(out.frame_lengths.to(frame_lengths.device), frame_lengths):
                raise ValueError(
                    f"members[{i}] gives other frame counts than the first member "
                    f"({out.frame_lengths.tolist()} against {frame_lengths.tolist()}) for clips of "
                    f"{lengths.tolist()} samples"
                )
        frames = int(frame_lengths.max()) if frame_lengths.numel() else 0
        weights = self.weights.to(outs[0].scores.dtype)
        intercept = self.intercept.to(outs[0].scores.dtype)
        scores = intercept + sum(out.scores * weights[:, m] for m, out in enumerate(outs))
        # Frames past a clip's length stay 0, as in each member's frame scores.
        frame_scores = sum(out.dim_frame_scores[:, :frames] * weights[:, m] for m, out in enumerate(outs))
        mask = torch.arange(frames, device=frame_lengths.device)[None, :] < frame_lengths[:, None]
        frame_scores = frame_scores + intercept * mask[..., None].to(frame_scores.dtype)
        return Prediction(scores[:, 0], frame_scores[:, :, 0], frame_lengths, scores, frame_scores)
