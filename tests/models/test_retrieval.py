"""The retrieval family: kNN scores, SHEET's distance weighting, fusion, domains from neighbours."""

from __future__ import annotations

import math

import pytest
import torch

from sqa.models.retrieval import (
    K_GRID,
    MAX_DATASTORE_ENTRIES,
    Datastore,
    choose_fusion_weight,
    choose_k,
    fuse,
    pooled_embedding,
)


def store_of(embeddings: torch.Tensor, labels: list[float], domains: list[int] | None = None, k: int = 1):
    n = embeddings.shape[0]
    return Datastore(
        embeddings.float(),
        torch.tensor(labels, dtype=torch.float32),
        torch.tensor(domains or [0] * n, dtype=torch.int64),
        torch.arange(n, dtype=torch.int64),
        k,
        0.5,
    )


def random_store(n: int = 50, d: int = 8, k: int = 1) -> Datastore:
    generator = torch.Generator().manual_seed(0)
    embeddings = torch.randn(n, d, generator=generator)
    labels = (1 + 4 * torch.rand(n, generator=generator)).tolist()
    return store_of(embeddings, labels, k=k)


def test_knn_with_k_1_returns_the_labels_of_the_datastore_s_own_embeddings():
    store = random_store()
    assert torch.equal(store.knn(store.embeddings), store.labels)


def test_distance_weighting_is_a_softmax_of_negative_squared_distances_by_hand():
    # Three points on a line at 0, 1 and 2; the query at 0.5 is 0.25 from the first two, 2.25 from the third.
    store = store_of(torch.tensor([[0.0], [1.0], [2.0]]), [1.0, 3.0, 5.0], k=3)
    weights = [math.exp(-0.25), math.exp(-0.25), math.exp(-2.25)]
    expected = sum(w * y for w, y in zip(weights, [1.0, 3.0, 5.0], strict=True)) / sum(weights)
    assert float(store.knn(torch.tensor([[0.5]]))[0]) == pytest.approx(expected, abs=1e-6)
    distances, indices = store.neighbours(torch.tensor([[0.5]]))
    assert indices.tolist() == [[0, 1, 2]]  # equal distances keep index order
    assert distances.tolist() == [[0.25, 0.25, 2.25]]


def test_fusion_weight_1_is_the_head_and_0_is_knn():
    parametric, knn = torch.tensor([1.0, 2.5, 4.0]), torch.tensor([3.0, 3.0, 2.0])
    assert torch.equal(fuse(parametric, knn, 1.0), parametric)
    assert torch.equal(fuse(parametric, knn, 0.0), knn)
    assert fuse(parametric, knn, 0.25).tolist() == pytest.approx([2.5, 2.875, 2.5])


def test_the_chosen_fusion_is_never_worse_than_its_better_part():
    generator = torch.Generator().manual_seed(1)
    labels = 1 + 4 * torch.rand(40, generator=generator)
    parametric = labels + 0.5 * torch.randn(40, generator=generator)
    knn = labels + 0.7 * torch.randn(40, generator=generator)
    weight, error = choose_fusion_weight(parametric, knn, labels)
    parts = [float((p - labels).pow(2).mean().sqrt()) for p in (parametric, knn)]
    assert 0.0 < weight < 1.0
    assert error <= min(parts) + 1e-9


def test_domains_are_looked_up_from_the_neighbours():
    # Domain 0 around (0, 0), domain 1 around (10, 10); one domain-1 point strays into cluster 0.
    points = torch.tensor([[0.0, 0.0], [0.5, 0.0], [0.0, 0.5], [0.2, 0.2], [10.0, 10.0], [10.5, 10.0]])
    store = store_of(points, [3.0] * 6, domains=[0, 0, 0, 1, 1, 1], k=3)
    queries = torch.tensor([[0.1, 0.1], [10.2, 10.1], [0.25, 0.25]])
    # The last query's single nearest entry is the stray domain-1 point, but most weight is domain 0.
    assert store.neighbour_domains(queries).tolist() == [0, 1, 0]
    assert store.neighbour_domains(queries, k=1).tolist() == [0, 1, 1]


def test_knn_scores_do_not_depend_on_the_batch():
    store = random_store(n=200, d=16, k=8)
    queries = torch.randn(7, 16, generator=torch.Generator().manual_seed(2))
    together = store.knn(queries)
    alone = torch.cat([store.knn(queries[i : i + 1]) for i in range(7)])
    assert torch.equal(together, alone)
    assert torch.equal(store.knn(queries.flip(0)), together.flip(0))


def test_the_pooled_embedding_is_the_mean_over_each_clip_s_own_frames():
    frames = torch.arange(24, dtype=torch.float32).reshape(2, 4, 3)
    pooled = pooled_embedding(frames, torch.tensor([4, 2]))
    assert torch.equal(pooled[0], frames[0].mean(dim=0))
    assert torch.equal(pooled[1], frames[1, :2].mean(dim=0))


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda s: s.__setitem__("embeddings", s["embeddings"].clone().fill_(math.nan)), "NaN"),
        (lambda s: s.__setitem__("labels", s["labels"][:-1]), "labels has shape"),
        (lambda s: s.__setitem__("embeddings", s["embeddings"].double()), "embeddings must be"),
        (lambda s: s.__setitem__("k", torch.tensor(0)), "k is 0"),
        (lambda s: s.__setitem__("fusion_weight", torch.tensor(1.5)), "fusion_weight is 1.5"),
        (lambda s: s.__setitem__("domains", -s["domains"] - 1), "≥ 0"),
        (lambda s: s.__setitem__("extra", torch.zeros(1)), "exactly"),
    ],
)
def test_a_wrong_datastore_is_refused_naming_what(change, fragment):
    state = random_store(n=5).as_state()
    change(state)
    with pytest.raises(ValueError, match=fragment):
        Datastore.from_state(state)


def test_an_oversized_datastore_is_refused_before_any_search():
    # A zero-width stride: (MAX+1, 1) entries that hold one float of memory.
    state = random_store(n=5).as_state()
    n = MAX_DATASTORE_ENTRIES + 1
    state["embeddings"] = torch.zeros(1, 1).expand(n, 1)
    for name in ("labels", "domains", "systems"):
        state[name] = state[name][:1].expand(n)
    with pytest.raises(ValueError, match=f"holds {n} entries"):
        Datastore.from_state(state)


@pytest.mark.parametrize("magnitude", [1.0, 1e20, 1e37])
def test_huge_finite_embeddings_give_the_distances_and_scores_of_small_ones(magnitude):
    # The points of the hand-computed case above, times `magnitude`: ‖e‖² of 1e20s overflows
    # float32, so a search in float32 alone would give NaN distances and a null score.
    store = store_of(torch.tensor([[0.0], [1.0], [2.0]]) * magnitude, [1.0, 3.0, 5.0], k=3)
    distances, indices = store.neighbours(torch.tensor([[0.5 * magnitude]]))
    assert indices.tolist() == [[0, 1, 2]]
    assert distances[0].tolist() == pytest.approx(
        [0.25 * magnitude**2, 0.25 * magnitude**2, 2.25 * magnitude**2]
    )
    score = float(store.knn(torch.tensor([[0.5 * magnitude]]))[0])
    assert math.isfinite(score)
    if magnitude > 1:
        # The distances differ by ~1e40: the softmax gives the two nearest all the weight.
        assert score == pytest.approx(2.0)
    # A query far larger than every entry is scaled with them: its distances stay finite.
    far = store.neighbours(torch.tensor([[3e38]]))
    assert bool(torch.isfinite(far[0]).all()) and far[0][0, 0] == pytest.approx((3e38 - 2 * magnitude) ** 2)


@pytest.mark.parametrize(
    "n, expected",
    [
        (1, (1, 1.5)),  # one entry: k=1 is tried, its error finite
        (2, (2, 0.0)),  # a size the grid tries: that k is tried
        (4, (4, 0.0)),
        (5, (4, 0.5)),  # between two k of the grid: the larger one (8) is not tried
    ],
)
def test_choose_k_tries_every_k_of_the_grid_up_to_the_datastores_size(n, expected):
    # Entries at one point: k neighbours score the mean of the first k labels 1, 2, ..., and the
    # query's label is the mean of all n, so the error of k is |mean(1..k) - mean(1..n)|.
    assert K_GRID[:4] == (1, 2, 4, 8)
    store = store_of(torch.zeros(n, 2), [float(i + 1) for i in range(n)])
    target = (n + 1) / 2 if n > 1 else 2.5
    k, error = choose_k(store, torch.zeros(1, 2), torch.tensor([target]))
    assert (k, error) == (expected[0], pytest.approx(expected[1], abs=1e-6))
    assert math.isfinite(error)


def test_choose_k_takes_the_smaller_k_of_a_tie_and_the_lowest_rmse_over_several_queries():
    store = store_of(torch.zeros(8, 1), [3.0] * 8)
    assert choose_k(store, torch.zeros(2, 1), torch.tensor([3.0, 3.0])) == (1, 0.0)
    # Two queries, entries at 0 (labels 1, 1, 5, 5) and far away (9 at 10): k=4 scores 3 at both.
    store = store_of(torch.tensor([[0.0], [0.0], [0.0], [0.0], [10.0]]), [1.0, 1.0, 5.0, 5.0, 9.0])
    k, error = choose_k(store, torch.zeros(2, 1), torch.tensor([3.0, 2.0]))
    # k=1: scores 1 -> RMSE sqrt((4 + 1) / 2); k=2: the same; k=4: 3 -> sqrt((0 + 1) / 2).
    assert (k, error) == (4, pytest.approx(math.sqrt(0.5), abs=1e-6))
