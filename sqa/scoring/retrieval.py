"""Scoring with an export's datastore: kNN and fusion modes, and domains looked up from neighbours.

`Scorer(mode=...)` chooses how the overall score is made (`sqa.models.retrieval`): "parametric"
(the head's, the default), "knn" (the labels of the nearest training clips) or "fusion" (λ·head +
(1−λ)·kNN with the λ chosen on validation). `domain="neighbours"` scores each clip (each window,
when chunked) as the domain most of its k nearest training clips come from. Other score
dimensions stay the head's: the datastore holds the overall labels only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sqa.core.prediction import Prediction
from sqa.exports.datastore import DATASTORE_FILE, has_datastore, read_datastore
from sqa.models.interface import FramePredictor, Predictor
from sqa.models.retrieval import MODES, Datastore, fuse, pooled_embedding

# The `domain` that looks each clip's domain up from its nearest training clips.
NEIGHBOURS_DOMAIN = "neighbours"


def neighbours_note(store: Datastore) -> str:
    """The one line saying that each clip's domain is looked up from its neighbours."""
    return (
        f"scoring each clip as the domain of most weight among its {store.k} nearest training clips "
        f"(--domain {NEIGHBOURS_DOMAIN}: the export's {DATASTORE_FILE}, {len(store)} clips)"
    )


@dataclass
class RetrievalScoring:
    """An export's datastore as `Scorer` uses it: the `mode` of the overall score, and domain lookup."""

    store: Datastore
    mode: str
    neighbour_domains: bool

    @property
    def weight(self) -> float:
        """The head's share λ of the overall score: 1 parametric, 0 kNN, the recorded λ in fusion."""
        return {"parametric": 1.0, "knn": 0.0}.get(self.mode, self.store.fusion_weight)

    def forward(
        self,
        predictor: FramePredictor,
        wav: torch.Tensor,
        lengths: torch.Tensor,
        f0: torch.Tensor | None,
        domains: list[int],
    ) -> tuple[list[Prediction], torch.Tensor]:
        """One prediction per domain scored as (or one, domains from neighbours) and the frames (B, T, D).

        The backbone runs once; its frames are also what the datastore's embeddings pool.
        """
        frames, frame_lengths = predictor.backbone(wav, lengths)
        if self.neighbour_domains:
            query = pooled_embedding(frames, frame_lengths).cpu()
            ids = [self.store.neighbour_domains(query).to(wav.device)]
        else:
            ids = [torch.full((wav.shape[0],), index, device=wav.device) for index in domains]
        outs = [predictor.score_frames(frames, frame_lengths, lengths, d, f0) for d in ids]
        return outs, frames

    def overall(self, parametric: float, embedding: torch.Tensor) -> float:
        """The overall score of a clip from the head's (export scale) and its clip embedding (D,)."""
        if self.mode == "parametric":
            return parametric
        knn = self.store.knn(embedding[None].float())[0]
        return float(fuse(torch.tensor(parametric, dtype=torch.float64), knn.double(), self.weight))


def retrieval_for(
    export: str | Path, predictor: Predictor, config: dict[str, Any], mode: str, domain: str | int | None
) -> RetrievalScoring | None:
    """The datastore use that `mode` and `domain` ask of `export`; None when neither needs one."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    neighbours = domain == NEIGHBOURS_DOMAIN
    if mode == "parametric" and not neighbours:
        return None
    asked = f"mode {mode!r}" if mode != "parametric" else f"domain {NEIGHBOURS_DOMAIN!r}"
    if not isinstance(predictor, FramePredictor):
        kind = type(predictor).__name__
        raise ValueError(f"{asked}: this export's model ({kind}) cannot score by retrieval")
    if not has_datastore(export):
        raise ValueError(
            f"{asked} needs the export's {DATASTORE_FILE} (the training clips' embeddings), which this "
            "export does not hold: train with retrieval.datastore=true (docs/scoring.md#retrieval)"
        )
    return RetrievalScoring(read_datastore(export, predictor, config), mode, neighbours)
