"""Training losses for MOS regression: pure functions of a `Prediction`, targets and a label mask.

Each takes the predictor's output first so that Hydra can bind the hyper-parameters
(`_partial_: true`) and the training loop calls every loss the same way. Targets are either the
overall scores (B,), compared with `out.score`, or one column per score dimension (B, K),
compared with `out.scores`; `mask` (bool, same shape as the targets, None: all labelled) marks the
labels that exist. A missing label contributes nothing to the loss or its gradient; the loss is
averaged over the labelled entries (pairs, for `contrastive`).

`gaussian_nll` and `laplace_nll` train a predictor with a spread (`sqa.models.uncertainty`):
they also take the clips' per-listener ratings of the overall score.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from sqa.core.masking import frame_mask
from sqa.core.prediction import Prediction


def _labelled(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Predictions shaped like `target` ((B,) or (B, K)), the targets and the float label mask."""
    score = out.scores if target.dim() == 2 else out.score
    if score.shape != target.shape:
        raise ValueError(f"targets of shape {tuple(target.shape)} for predictions {tuple(score.shape)}")
    if mask is None:
        return score, target, torch.ones_like(target)
    # A missing label (often NaN) becomes the prediction itself: zero error, and no NaN that
    # the mask's zero could not cancel in the gradient.
    target = torch.where(mask, target, score.detach())
    return score, target, mask.to(target.dtype)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def margin_l1(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None = None, margin: float = 0.1
) -> torch.Tensor:
    """Utterance-level margin L1: mean over labels of 1[|ŷ−y| ≥ margin]·|ŷ−y|. Returns a scalar."""
    score, target, mask = _labelled(out, target, mask)
    err = (score - target).abs()
    return _masked_mean(err * (err >= margin).to(err.dtype), mask)


def frame_margin_l1(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None = None, tau: float = 0.5
) -> torch.Tensor:
    """Frame-level margin L1: each clip's target repeated over its valid frames, mean over them."""
    _, target, mask = _labelled(out, target, mask)
    frames = out.dim_frame_scores if target.dim() == 2 else out.frame_scores
    valid = frame_mask(out.frame_lengths, frames.shape[1]).to(frames.dtype)
    if target.dim() == 2:
        valid = valid[:, :, None]
    valid = valid * mask[:, None]
    err = (frames - target[:, None]).abs()
    return _masked_mean(err * (err >= tau).to(err.dtype), valid)


def clipped_mse(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None = None, tau: float = 0.5
) -> torch.Tensor:
    """MSE over the labels that ignores those whose absolute error is at most `tau`."""
    score, target, mask = _labelled(out, target, mask)
    err = score - target
    return _masked_mean((err.abs() > tau).to(err.dtype) * err**2, mask)


def contrastive(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None = None, margin: float = 0.1
) -> torch.Tensor:
    """Pairwise loss mean_ij max(0, |(ŷ_i−ŷ_j)−(y_i−y_j)| − margin) / 2 over labelled pairs."""
    score, target, mask = _labelled(out, target, mask)
    d_pred = score[:, None] - score[None, :]
    d_true = target[:, None] - target[None, :]
    pairs = mask[:, None] * mask[None, :]
    return _masked_mean(((d_pred - d_true).abs() - margin).clamp_min(0.0), pairs) / 2


def weighted_sum(
    out: Prediction,
    target: torch.Tensor,
    mask: torch.Tensor | None = None,
    losses: Sequence[Callable[..., torch.Tensor]] = (),
    weights: Sequence[float] = (),
) -> torch.Tensor:
    """Σ_k weights[k] · losses[k](out, target, mask): several losses trained as one (a scalar).

    Each term averages over its own labels (or pairs), as it does alone; conf/loss/utmosv2.yaml
    composes UTMOSv2's 0.7 × pairwise difference + 0.2 × MSE from `contrastive` and `clipped_mse`.
    """
    if not losses or len(losses) != len(weights):
        raise ValueError(
            f"weighted_sum needs one weight per loss, got {len(losses)} loss(es), {len(weights)} weight(s)"
        )
    return sum(
        (w * loss(out, target, mask) for loss, w in zip(losses, weights, strict=True)), target.new_zeros(())
    )


def _ratings_or_mean(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None, ratings: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each clip's per-listener ratings (B, R), its overall label alone where it has none; their mask.

    `ratings` (B, R) are NaN-padded (R may be 0); a clip with no rating falls back to its overall
    target (the clip mean), one without that label either counts for nothing.
    """
    if out.spread is None:
        raise ValueError("a likelihood loss needs a predictor with a spread (sqa.models.uncertainty)")
    mean = target[:, 0] if target.dim() == 2 else target
    labelled = (
        torch.ones_like(mean, dtype=torch.bool) if mask is None else (mask[:, 0] if mask.dim() == 2 else mask)
    )
    if ratings is None:
        ratings = mean.new_empty((mean.shape[0], 0))
    rated = ~torch.isnan(ratings)
    fallback = labelled & ~rated.any(dim=1)
    values = torch.cat([ratings, mean[:, None]], dim=1)
    valid = torch.cat([rated, fallback[:, None]], dim=1)
    # A missing value becomes the prediction itself: no NaN that the mask could not cancel.
    values = torch.where(valid, values, out.score.detach()[:, None])
    return values, valid.to(values.dtype)


def _per_clip_mean(nll: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean over clips of each clip's mean NLL (B, R) over its valid ratings: every clip weighs the same."""
    return _mean_over_clips((nll * valid).sum(dim=1), valid.sum(dim=1))


def _mean_over_clips(total: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Mean over the clips with ratings of each clip's NLL `total` (B,) divided by its rating count (B,)."""
    return _masked_mean(total / counts.clamp_min(1.0), (counts > 0).to(total.dtype))


def gaussian_nll(
    out: Prediction,
    target: torch.Tensor,
    mask: torch.Tensor | None = None,
    ratings: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gaussian NLL ½(log σ² + (r − ŷ)²/σ²) of each rating r (B, R) given the clip's ŷ and σ = spread.

    The constant ½ log 2π is left out, as `torch.nn.functional.gaussian_nll_loss` does by default.
    With a `listener_spread` σ_L (B,), a clip's n ratings are one draw of a Gaussian with mean ŷ
    and covariance σ_L²·I + σ_M²·11ᵀ (σ_M² = spread² − σ_L², the model's error shared by them):
    its NLL, ½((n−1) log σ_L² + log(σ_L² + nσ_M²) + Σ(r − r̄)²/σ_L² + n(r̄ − ŷ)²/(σ_L² + nσ_M²)),
    divided by n so that every clip weighs the same. For one rating it is the NLL above.
    """
    values, valid = _ratings_or_mean(out, target, mask, ratings)
    var = out.spread[:, None] ** 2
    if out.listener_spread is None:
        return _per_clip_mean(0.5 * (torch.log(var) + (values - out.score[:, None]) ** 2 / var), valid)
    n = valid.sum(dim=1)
    listener = out.listener_spread**2
    shared = listener + n * (var[:, 0] - listener)
    mean = (values * valid).sum(dim=1) / n.clamp_min(1.0)
    within = (((values - mean[:, None]) ** 2) * valid).sum(dim=1)
    nll = 0.5 * (
        (n - 1) * torch.log(listener)
        + torch.log(shared)
        + within / listener
        + n * (mean - out.score) ** 2 / shared
    )
    return _mean_over_clips(nll, n)


def laplace_nll(
    out: Prediction,
    target: torch.Tensor,
    mask: torch.Tensor | None = None,
    ratings: torch.Tensor | None = None,
) -> torch.Tensor:
    """Laplace NLL log(2b) + |r − ŷ|/b of each rating r (B, R) given the clip's ŷ and scale b = spread."""
    values, valid = _ratings_or_mean(out, target, mask, ratings)
    scale = out.spread[:, None]
    return _per_clip_mean(torch.log(2 * scale) + (values - out.score[:, None]).abs() / scale, valid)


# The likelihood loss of each distribution an uncertain predictor may predict.
NLL_LOSSES = {"gaussian": gaussian_nll, "laplace": laplace_nll}
