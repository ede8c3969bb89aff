"""The interface every predictor family implements: what training, export and scoring rely on.

A family is an `nn.Module` (`MOSPredictor` and its subclasses, `DistillMosZeroShot`,
`CalibratedPredictor`, `EnsemblePredictor`) whose `forward` scores a padded batch on the internal
1-5 scale, mapped onto the corpus's rating scale by `to_scale`; an export rebuilds it from the
keyword arguments its `export_config()` records (`sqa.exports.targets.PREDICTOR_CLASSES` lists
the families an export may name). docs/architecture.md#how-to-add-a-model-family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from sqa.core.prediction import Prediction


class BackboneSizes(Protocol):
    """What is read of a predictor's backbone to prepare clips: its receptive field and frame hop."""

    min_samples: int
    hop_length: int


class Backbone(BackboneSizes, Protocol):
    """A backbone that computes frames: `sqa.models.backbone`'s interface."""

    def __call__(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Wav (B, N), lengths (B,) -> frames (B, T, D), frame_lengths (B,)."""
        ...


@runtime_checkable
class Predictor(Protocol):
    """A predictor family: clip scores on the internal 1-5 scale, its rating scale, its export.

    `Prediction.scores` (B, K) and `dim_frame_scores` (B, T, K) hold the K `dimensions` in order.
    """

    # How frame scores become a clip score; the scorer may set it (families that pool their own
    # way refuse other values).
    pooling: str
    # The architecture's config dataclass: `export_config()` writes its fields to config.yaml.
    config: Any

    if TYPE_CHECKING:
        # For type checkers only: nn.Module keeps a sub-module in `_modules`, where isinstance's
        # lookup (inspect.getattr_static from Python 3.12 on) does not find it.
        @property
        def backbone(self) -> BackboneSizes:
            """The backbone the scorer pads short clips (min_samples) and counts frames (hop_length) by."""
            ...

    @property
    def dimensions(self) -> Sequence[str]:
        """The K score names, the overall "mos" first."""
        ...

    @property
    def score_range(self) -> tuple[float, float]:
        """The rating scale (low, high) that `to_scale` maps scores onto."""
        ...

    @property
    def domain_count(self) -> int | None:
        """How many domain IDs (0..count-1) the model scores differently; None: it takes none."""
        ...

    def to_internal(self, values: torch.Tensor) -> torch.Tensor:
        """Labels (any shape) on `score_range` mapped onto the internal 1-5 scale (the losses')."""
        ...

    def to_scale(self, values: torch.Tensor) -> torch.Tensor:
        """Scores (any shape) on the internal 1-5 scale mapped onto `score_range`."""
        ...

    def spread_to_scale(self, spread: torch.Tensor) -> torch.Tensor:
        """Spreads (any shape) on the internal scale mapped onto `score_range`'s width."""
        ...

    def start_at(self, scores: Sequence[float]) -> None:
        """Score every clip `scores` (K, on `score_range`) until training moves it; else ValueError."""
        ...

    def forward(
        self,
        wav: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """Score wav (B, N) of lengths (B,) samples; domain (B,) and judge (B,) IDs, f0 (B, T') in Hz."""
        ...

    def __call__(
        self,
        wav: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """`forward` through the module's hooks."""
        ...

    @classmethod
    def export_target(cls) -> str:
        """The `_target_` that builds the family, e.g. 'sqa.models.predictor.MOSPredictor'."""
        ...

    def export_config(self) -> dict[str, Any]:
        """config.yaml's `model` node: `_target_` and the constructor's keyword arguments."""
        ...

    def state_dict(self) -> Mapping[str, Any]:
        """The weights model.pt holds, by parameter name."""
        ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
        """Load weights of `state_dict`'s names and shapes (an export's model.pt)."""
        ...


@runtime_checkable
class FramePredictor(Predictor, Protocol):
    """A predictor that scores its backbone's frames: they may be computed once and reused.

    The frame cache of a frozen backbone and retrieval's embeddings rely on it.
    """

    if TYPE_CHECKING:

        @property
        def backbone(self) -> Backbone:
            """The backbone whose frames `score_frames` scores."""
            ...

    def score_frames(
        self,
        frames: torch.Tensor,
        frame_lengths: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """`forward` after the backbone: frames (B, T, D), frame_lengths (B,), lengths (B,) in samples."""
        ...
