"""Ridge stacking weights of an ensemble, fitted on its members' predictions of shared validation clips."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np
import torch

from sqa.core.artefacts import score_columns
from sqa.core.prediction import OVERALL
from sqa.data.corpus import Clip, Corpus
from sqa.training.ensemble.members import EnsembleError, Member, clip_keys
from sqa.training.evaluation import tested

log = logging.getLogger(__name__)

# sklearn's Ridge default: mild shrinkage for members' predictions spread about 1 on the 1-5 scale.
DEFAULT_ALPHA = 1.0


def validation_corpus(members: Sequence[Member], corpora: Sequence[Corpus | None]) -> Corpus:
    """The validation clips every member shares, as the test sets (one per domain) of a corpus."""

    def valid_clips(corpus: Corpus) -> list[Clip]:
        return [c for clips in corpus.valid_sets().values() for c in clips]

    for member, corpus in zip(members, corpora, strict=True):
        if corpus is None or not valid_clips(corpus):
            raise EnsembleError(
                f"{member.name}: records no corpus with validation clips, so it has no validation "
                "predictions to fit ridge weights on; use --method mean (or the exports of training runs)"
            )
    first = clip_keys(valid_clips(corpora[0]))
    for member, corpus in zip(members[1:], corpora[1:], strict=True):
        keys = clip_keys(valid_clips(corpus))
        if keys != first:
            raise EnsembleError(
                f"{member.name}: its run validated on other clips ({len(keys)}) than {members[0].name}'s "
                f"({len(first)}); ridge weights are fitted on validation clips that every member shares: "
                "use --method mean, or members trained on the same validation split"
            )
    return corpora[0].valid_as_test()


def fit_ridge(predictions: np.ndarray, labels: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """Weights (M,) and intercept b minimising |labels - b - predictions·w|² + alpha·|w|²; predictions (n, M).

    labels (n,).
    """
    mean_x, mean_y = predictions.mean(axis=0), float(labels.mean())
    # Centred, the unpenalised intercept drops out of the normal equations.
    x, y = predictions - mean_x, labels - mean_y
    weights = np.linalg.solve(x.T @ x + alpha * np.eye(x.shape[1]), x.T @ y)
    return weights, mean_y - float(mean_x @ weights)


def ridge_weights(
    members: Sequence[Member], valid: Corpus, batch_size: int, alpha: float
) -> tuple[list[list[float]], list[float]]:
    """Ridge weights (K, M) and intercepts (K,) per score dimension, on the internal scale.

    Each dimension is fitted on the validation clips labelled with it.
    """
    rows = [
        tested(m.predictor, valid, m.config, m.f0_extractor, batch_size).test_predictions for m in members
    ]
    weights, intercepts = [], []
    for dim in members[0].predictor.dimensions:
        true_key, pred_key = score_columns(None if dim == OVERALL else dim)
        labels = {r["sample_id"]: r[true_key] for r in rows[0] if not math.isnan(r[true_key])}
        if len(labels) < 2:
            raise EnsembleError(
                f"{len(labels)} validation clip(s) have a {dim!r} score; ridge weights need at least 2"
            )
        ids = sorted(labels)
        preds = [{r["sample_id"]: r[pred_key] for r in member_rows} for member_rows in rows]
        x = np.array([[p[i] for p in preds] for i in ids], dtype=np.float64)
        y = np.array([labels[i] for i in ids], dtype=np.float64)
        to_internal = members[0].predictor.to_internal
        w, b = fit_ridge(
            to_internal(torch.from_numpy(x)).numpy(), to_internal(torch.from_numpy(y)).numpy(), alpha
        )
        weights.append([float(v) for v in w])
        intercepts.append(b)
        log.info(
            "ridge weights of %s on %d validation clips: %s, intercept %.4g", dim, len(ids), w.round(4), b
        )
    return weights, intercepts
