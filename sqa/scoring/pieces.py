"""Prepared clips' pieces through an export's predictor, and each clip's scores and spread pooled back.

A whole clip is one piece; a chunked one is several windows, each keeping the frames it alone
scores (`sqa.scoring.clips`). The scores of a clip are its pieces' kept frame scores pooled, so
they never depend on the pieces scored beside it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from sqa.core.spread import pooled
from sqa.data.batching import pad_batch
from sqa.models.backbone import W2V_HOP
from sqa.models.interface import Predictor
from sqa.scoring.clips import Piece, PreparedClip
from sqa.scoring.retrieval import RetrievalScoring

# Why a clip has no overall score in kNN or fusion mode although its audio was read.
QUERY_NOT_FINITE = (
    "no score (mode {mode!r}): the clip's pooled backbone embedding (the query of its nearest "
    "training clips) holds NaN or infinite values"
)
# Why a score the model gave is left null.
SCORE_NOT_FINITE = "no score: the model gave a NaN or infinite score for this clip"


def chunk_length(chunk_seconds: float, sample_rate: int, min_samples: int) -> int:
    """Samples per window for `chunk_seconds`: whole 20 ms hops (at least 4), at least `min_samples`."""
    hops = max(4, round(chunk_seconds * sample_rate / W2V_HOP))
    return max(min_samples, hops * W2V_HOP)


@torch.inference_mode()
def forward_pieces(
    predictor: Predictor,
    pieces: list[Piece],
    device: torch.device,
    batch_size: int,
    domains: list[int],
    retrieval: RetrievalScoring | None = None,
    spread: bool = False,
    f0: bool = False,
    embeddings: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
    """Scores (P, K), each piece's kept frame scores (n_p, K) on the 1-5 scale, and spreads (P,).

    Scores and spreads are on the export's scale; spreads are None unless `spread` (the
    predictor has a distribution). `f0`: the pieces carry f0 tracks for the predictor.
    `embeddings`, where given, is filled with each piece's sum of kept backbone frames (D,).

    Pieces go in length-sorted batches of `batch_size`, on the CPU one piece per forward
    pass: CPU kernels sum in an order that depends on the batch's shape (a clip's score moved
    by 2e-7 between a batch of 1 and of 4, padded or not), and a score must not depend on
    its batch mates. With several `domains` (the mean over domains), scores and frame scores are the
    means of one forward pass per domain, and spreads their root mean square (`sqa.core.spread.pooled`).
    """
    dimensions = len(predictor.dimensions)
    scores = np.zeros((len(pieces), dimensions), dtype=np.float32)
    spreads = np.zeros(len(pieces)) if spread else None
    frames: list[np.ndarray] = [np.zeros((0, dimensions))] * len(pieces)
    if embeddings is not None:
        embeddings[:] = [np.zeros(0)] * len(pieces)
    order = sorted(range(len(pieces)), key=lambda i: pieces[i][0].shape[0])
    step = 1 if device.type == "cpu" else batch_size
    for start in range(0, len(order), step):
        idx = order[start : start + step]
        wav, lengths = pad_batch([torch.from_numpy(pieces[i][0]) for i in idx])
        tracks = None
        if f0:
            tracks = pad_batch([torch.from_numpy(pieces[i][1]) for i in idx])[0].to(device)
        wav, lengths = wav.to(device), lengths.to(device)
        backbone_frames = None
        if retrieval is not None:
            outs, backbone_frames = retrieval.forward(predictor, wav, lengths, tracks, domains)
        else:
            outs = [
                predictor(wav, lengths, torch.full((len(idx),), index, device=device), tracks)
                for index in domains
            ]
        # The mean of one array is that array exactly: a single domain scores as before.
        scores[idx] = np.mean([predictor.to_scale(o.scores.float()).cpu().numpy() for o in outs], axis=0)
        frame_scores = np.mean([o.dim_frame_scores.double().cpu().numpy() for o in outs], axis=0)
        if spreads is not None:
            # Float32 spreads squared are exact in float64: one domain's spread comes back as it was.
            per_domain = [predictor.spread_to_scale(o.spread.float()).double().cpu().numpy() for o in outs]
            spreads[idx] = np.sqrt(np.mean(np.square(per_domain), axis=0))
        for row, i in enumerate(idx):
            lo, hi = pieces[i][2] or (0, int(outs[0].frame_lengths[row]))
            frames[i] = frame_scores[row, lo:hi]
            if embeddings is not None and backbone_frames is not None:
                embeddings[i] = backbone_frames[row, lo:hi].double().sum(dim=0).cpu().numpy()
    return scores, frames, spreads


def pool_pieces(
    clips: list[PreparedClip],
    scores: np.ndarray,
    frames: list[np.ndarray],
    spreads: np.ndarray | None,
    predictor: Predictor,
    retrieval: RetrievalScoring | None = None,
    embeddings: list[np.ndarray] | None = None,
) -> list[tuple[PreparedClip, list[float | None], float | None]]:
    """Each clip's scores (K,), the mean over its pieces' kept frames (a whole clip: its own), and spread.

    `scores` (P, K), `frames` and `spreads` (P,) are `forward_pieces`' for the clips' pieces in
    order. The spread (None without `spreads`) is a whole clip's own, or its windows' pooled by
    their kept frames (`sqa.core.spread.pooled`). A clip without pieces (no vocal activity) gets
    K Nones and None. With `embeddings`, the overall score is `retrieval`'s of the clip's mean
    kept backbone frame, None where that mean is not finite. Every score that is NaN or infinite
    is None, and the clip carries the reason (`finite_scores`).
    """
    out: list[tuple[PreparedClip, list[float | None], float | None]] = []
    start = 0
    for clip in clips:
        rows = slice(start, start + len(clip.pieces))
        start = rows.stop
        if not clip.pieces:
            out.append((clip, [None] * len(predictor.dimensions), None))
            continue
        # Each piece weighs as much as the frames it keeps: in the score, the spread and the query.
        kept_counts = [kept.shape[0] for kept in frames[rows]]
        spread = None
        if spreads is not None:
            single = len(clip.pieces) == 1
            spread = float(spreads[rows.start]) if single else pooled(spreads[rows], kept_counts)
        row: list[float | None]
        if len(clip.pieces) == 1:
            row = scores[rows.start].tolist()
        else:
            sums = np.sum([kept.sum(axis=0) for kept in frames[rows]], axis=0)
            # Frame scores are on the head's 1-5 scale; the map to the user's scale is linear.
            row = predictor.to_scale(torch.from_numpy(sums / sum(kept_counts))).tolist()
        reason = None
        if embeddings is not None and retrieval is not None:
            # The clip's embedding is the mean of its kept frames, as the datastore's are.
            mean = np.sum(embeddings[rows], axis=0) / sum(kept_counts)
            if np.isfinite(mean).all():
                row[0] = retrieval.overall(row[0], torch.from_numpy(mean))
            else:
                # NaN distances would rank the neighbours arbitrarily: no neighbour, no score.
                row[0], reason = None, QUERY_NOT_FINITE.format(mode=retrieval.mode)
        out.append(finite_scores(clip, row, spread, reason))
    return out


def finite_scores(
    clip: PreparedClip, row: list[float | None], spread: float | None, reason: str | None
) -> tuple[PreparedClip, list[float | None], float | None]:
    """`clip`'s scores (K,) with each NaN or infinite one None, the clip carrying why, and its spread.

    `reason` is why the overall score is already None; a clip whose overall score is None has no
    spread either.
    """
    finite = [None if value is None or not math.isfinite(value) else value for value in row]
    if reason is None and finite != row:
        reason = SCORE_NOT_FINITE
    if reason is None:
        return clip, row, spread
    return replace(clip, reason=reason), finite, spread if finite[0] is not None else None
