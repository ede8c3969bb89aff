"""Retrieval: a datastore of training-clip embeddings, kNN scores and their fusion with the head's.

The idea is SHEET's non-parametric inference (`sheet/nonparametric/datastore.py`) and RAMP's:
a clip is scored by the labels of the training clips nearest to it, each weighted by the softmax
of its negative squared Euclidean distance over the k nearest (SHEET's weighting), and that score
may be fused with the head's: λ·parametric + (1−λ)·kNN, λ chosen on validation.

The stored embedding is the clip mean of the backbone's frames: the part of the head's input that
comes from the signal, before any domain, pitch or judge branch is concatenated (SHEET stores
the mean of its SSL layer likewise). It depends on no domain, so the domain of an unseen clip can
be looked up from its neighbours (`neighbour_domains`, SHEET's `domain_id_knn_1` with k=1).
Search is exact and brute force, one query at a time: at sqa's corpus sizes (at most
`MAX_DATASTORE_ENTRIES`) it needs no FAISS, and a score never depends on its batch mates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sqa.core.masking import masked_mean

# The most entries a datastore may hold: ~800 MB of float32 embeddings at D=1024, and a few tens
# of ms of brute-force search per clip on a CPU; sqa's corpora hold tens of thousands of clips.
MAX_DATASTORE_ENTRIES = 200_000
# The most neighbours a score may draw on.
MAX_K = 1024
# The fusion weights λ tried on validation (0: kNN alone, 1: the head alone).
FUSION_GRID = tuple(i / 20 for i in range(21))
# The neighbour counts tried on validation.
K_GRID = (1, 2, 4, 8, 16, 32, 64)
MODES = ("parametric", "knn", "fusion")


def pooled_embedding(frames: torch.Tensor, frame_lengths: torch.Tensor) -> torch.Tensor:
    """The clip means (B, D) in float32 of backbone frames (B, T, D) over each clip's frame_lengths (B,)."""
    return masked_mean(frames.float(), frame_lengths)


def fuse(parametric: torch.Tensor, knn: torch.Tensor, weight: float) -> torch.Tensor:
    """λ·parametric + (1−λ)·knn of scores of any (equal) shape, λ = `weight` in [0, 1]."""
    if weight == 1.0:
        return parametric
    if weight == 0.0:
        return knn
    return weight * parametric + (1.0 - weight) * knn


@dataclass
class Datastore:
    """Training clips' embeddings (N, D) with labels (N,), domain and system IDs (N,); k and λ.

    Embeddings and labels (on the export's rating scale) are float32, IDs int64; `k` is the
    neighbours per score, `fusion_weight` the head's share λ in fusion.
    """

    embeddings: torch.Tensor
    labels: torch.Tensor
    domains: torch.Tensor
    systems: torch.Tensor
    k: int
    fusion_weight: float

    def __post_init__(self) -> None:
        problem = datastore_problem(self.as_state())
        if problem is not None:
            raise ValueError(problem)
        # Distances are computed on embeddings divided by a power of two (exactly) that brings
        # them within ±2, so that ‖e‖² cannot overflow float32 (finite 1e20s square to inf), and
        # scaled back in float64. Stores of ordinary embeddings (within ±1e15) are used as they are.
        self.scale = _power_of_two_above(float(self.embeddings.abs().max()))
        self.scaled = self.embeddings if self.scale == 1.0 else self.embeddings / self.scale
        # ‖e‖² of every entry (of `scaled`), once: each search needs them.
        self.norms = self.scaled.pow(2).sum(dim=1)

    def __len__(self) -> int:
        return int(self.embeddings.shape[0])

    def as_state(self) -> dict[str, torch.Tensor]:
        """The datastore as plain tensors (what datastore.pt holds)."""
        return {
            "embeddings": self.embeddings,
            "labels": self.labels,
            "domains": self.domains,
            "systems": self.systems,
            "k": torch.tensor(self.k, dtype=torch.int64),
            "fusion_weight": torch.tensor(self.fusion_weight, dtype=torch.float32),
        }

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> Datastore:
        """A datastore from `as_state`'s tensors (checked: ValueError names what is wrong)."""
        problem = datastore_problem(state)
        if problem is not None:
            raise ValueError(problem)
        return cls(
            state["embeddings"],
            state["labels"],
            state["domains"],
            state["systems"],
            int(state["k"]),
            float(state["fusion_weight"]),
        )

    def neighbours(self, query: torch.Tensor, k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Squared distances (B, k) in float64 and indices (B, k) of the k nearest entries to queries (B, D).

        Nearest first; equal distances keep index order. One query at a time (‖e‖² − 2e·q + ‖q‖², a
        matrix-vector product): each row is the same alone and in any batch, and no (N, D)
        temporary is made (0.7 s per query for 20 000 entries of 1024 dimensions, against 40 ms).
        Entries and query are divided by one power of two `t` (exact) that brings both within
        ±2, the distances computed in float32 and multiplied by t² in float64: finite for every
        finite embedding and query (a query that is not finite gives NaN distances).
        """
        k = min(self.k if k is None else k, len(self))
        if query.dim() != 2 or query.shape[1] != self.embeddings.shape[1]:
            raise ValueError(f"query must be (B, {self.embeddings.shape[1]}), got {tuple(query.shape)}")
        distances, indices = [], []
        for row in query.to(self.embeddings):
            scale = max(self.scale, _power_of_two_above(float(row.abs().max())))
            ratio = self.scale / scale  # a power of two: 1 unless the query is the larger
            row = row / scale
            # Rounding can take a distance of ~0 below it.
            squared = ratio * ratio * self.norms - 2.0 * ratio * (self.scaled @ row) + row.pow(2).sum()
            squared = squared.clamp_min(0.0)
            order = torch.sort(squared, stable=True).indices[:k]
            distances.append(squared[order].double() * scale * scale)
            indices.append(order)
        return torch.stack(distances), torch.stack(indices)

    def knn(self, query: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """Scores (B,) of queries (B, D): the k nearest labels weighted by softmax(−squared distance)."""
        distances, indices = self.neighbours(query, k)
        weights = torch.softmax(-distances.double(), dim=1)
        return (weights * self.labels[indices].double()).sum(dim=1).float()

    def neighbour_domains(self, query: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """Domain IDs (B,) of queries (B, D): the domain of most weight among the k nearest.

        Each neighbour weighs softmax(−squared distance), as in `knn`.

        Ties go to the lower ID; with k=1 it is the nearest entry's domain (SHEET's domain_id_knn_1).
        """
        distances, indices = self.neighbours(query, k)
        weights = torch.softmax(-distances.double(), dim=1)
        count = int(self.domains.max()) + 1
        votes = torch.zeros(query.shape[0], count, dtype=torch.float64)
        votes.scatter_add_(1, self.domains[indices], weights)
        return votes.argmax(dim=1)


# Embeddings within this bound are searched as they are: their squared norms stay far from
# float32's largest value (3.4e38) for any width sqa builds.
_UNSCALED = 2.0**50


def _power_of_two_above(value: float) -> float:
    """1 where `value` is at most `_UNSCALED` (or not finite), else a power of two within [value / 2, value].

    The smallest power of two at least `value`, but at most 2^127 (float32's largest power of two).
    """
    return 2.0 ** min(127, math.ceil(math.log2(value))) if _UNSCALED < value < math.inf else 1.0


def datastore_problem(state: dict[str, torch.Tensor]) -> str | None:
    """What is wrong with a datastore's tensors (names, dtypes, shapes, values, N bounded), or None."""
    want = {
        "embeddings": torch.float32,
        "labels": torch.float32,
        "domains": torch.int64,
        "systems": torch.int64,
        "k": torch.int64,
        "fusion_weight": torch.float32,
    }
    if set(state) != set(want):
        return f"holds {sorted(state)}; a datastore holds exactly {sorted(want)}"
    for name, dtype in want.items():
        if not isinstance(state[name], torch.Tensor) or state[name].dtype != dtype:
            return f"{name} must be a {dtype} tensor"
        if state[name].layout != torch.strided:
            return f"{name} must be a dense tensor"
    embeddings = state["embeddings"]
    if embeddings.dim() != 2 or embeddings.shape[1] < 1:
        return f"embeddings must be (N, D), got shape {tuple(embeddings.shape)}"
    n = embeddings.shape[0]
    if not 1 <= n <= MAX_DATASTORE_ENTRIES:
        return f"holds {n} entries; a datastore holds 1 to {MAX_DATASTORE_ENTRIES}"
    for name in ("labels", "domains", "systems"):
        if tuple(state[name].shape) != (n,):
            return f"{name} has shape {tuple(state[name].shape)}; embeddings need ({n},)"
    for name in ("k", "fusion_weight"):
        if state[name].dim() != 0:
            return f"{name} must be a single number, got shape {tuple(state[name].shape)}"
    for name in ("embeddings", "labels"):
        if not bool(torch.isfinite(state[name]).all()):
            return f"{name} holds NaN or infinite values"
    if bool((state["domains"] < 0).any()) or bool((state["systems"] < 0).any()):
        return "domain and system IDs must be ≥ 0"
    if not 1 <= int(state["k"]) <= MAX_K:
        return f"k is {int(state['k'])}; it must be 1 to {MAX_K}"
    weight = float(state["fusion_weight"])
    if not (math.isfinite(weight) and 0.0 <= weight <= 1.0):
        return f"fusion_weight is {weight}; it must be in [0, 1]"
    return None


def rmse(predicted: torch.Tensor, labels: torch.Tensor) -> float:
    """Root mean squared error of predictions (M,) against labels (M,)."""
    return float((predicted.double() - labels.double()).pow(2).mean().sqrt())


def choose_k(store: Datastore, query: torch.Tensor, labels: torch.Tensor) -> tuple[int, float]:
    """The k of `K_GRID` (at most N) whose kNN scores of queries (M, D) have the lowest RMSE on labels (M,).

    Returns (k, its RMSE); a tie goes to the smaller k.
    """
    best = (1, math.inf)
    for k in K_GRID:
        if k > len(store):
            break
        error = rmse(store.knn(query, k), labels)
        if error < best[1]:
            best = (k, error)
    return best


def choose_fusion_weight(
    parametric: torch.Tensor, knn: torch.Tensor, labels: torch.Tensor
) -> tuple[float, float]:
    """The λ of `FUSION_GRID` whose fusion of scores (M,) has the lowest RMSE on labels (M,): (λ, RMSE).

    The grid holds 0 and 1, so the fusion's RMSE is at most the better part's; a tie goes to
    the larger λ (the head).
    """
    best = (1.0, math.inf)
    for weight in sorted(FUSION_GRID, reverse=True):
        error = rmse(fuse(parametric, knn, weight), labels)
        if error < best[1]:
            best = (weight, error)
    return best
