"""A run's datastore (`retrieval.datastore: true`): the selected model's embeddings of its training clips.

After testing, the selected model (eval mode, whole clips, one at a time) embeds every training
clip (`sqa.models.retrieval.pooled_embedding`: the clip mean of its backbone frames) and stores
it with the clip's label, domain and system. On the validation clips (as validation reads them)
it then chooses k (the kNN RMSE's lowest) and the fusion weight λ (the fusion RMSE's lowest;
λ=1 is the head alone, so fusion is never worse on validation than the better of its parts), and
measures all three modes on each test set beside the constant training-mean predictor.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from scipy import stats

from sqa.data.corpus import Clip
from sqa.data.dataset import ClipDataset
from sqa.models.predictor import MOSPredictor
from sqa.models.retrieval import Datastore, choose_fusion_weight, choose_k, fuse, pooled_embedding, rmse
from sqa.training.datamodule import MOSDataModule

log = logging.getLogger(__name__)


class Embedded(NamedTuple):
    """Clips as the model sees them: embeddings (M, D), head scores (M,) and labels (M,), export scale."""

    embeddings: torch.Tensor
    parametric: torch.Tensor
    labels: torch.Tensor
    domains: torch.Tensor


@torch.inference_mode()
def embed_clips(
    predictor: MOSPredictor, datamodule: MOSDataModule, clips: Sequence[Clip], max_seconds: float | None
) -> Embedded:
    """Embed `clips` one at a time (whole, or their first `max_seconds`); head scores as their own domain."""
    dataset = ClipDataset(
        clips,
        datamodule.corpus,
        datamodule.sample_rate,
        max_seconds,
        seed=datamodule.seed,
        f0_extractor=datamodule.f0_extractor,
        crop_from_start=True,
        vocal_only=datamodule.vocal_only,
    )
    device = next(predictor.parameters()).device
    embeddings, scores, domains = [], [], []
    for index in range(len(dataset)):
        item = dataset[index]
        wav = item["wav"][None].to(device)
        lengths = torch.tensor([wav.shape[1]], device=device)
        f0 = item["f0"][None].to(device) if item["f0"] is not None else None
        domain = torch.tensor([item["domain"]], device=device)
        frames, frame_lengths = predictor.backbone(wav, lengths)
        embeddings.append(pooled_embedding(frames, frame_lengths)[0].cpu())
        prediction = predictor.score_frames(frames, frame_lengths, lengths, domain, f0)
        scores.append(predictor.to_scale(prediction.score.float())[0].cpu())
        domains.append(item["domain"])
    return Embedded(
        torch.stack(embeddings),
        torch.stack(scores),
        torch.tensor([c.mos for c in clips], dtype=torch.float32),
        torch.tensor(domains, dtype=torch.int64),
    )


def _figures(store: Datastore, clips: Embedded, constant: float | None = None) -> dict[str, float]:
    """RMSE and utterance SRCC of each mode (and of the constant `constant`, where given) on `clips`."""
    knn = store.knn(clips.embeddings)
    scores = {
        "parametric": clips.parametric,
        "knn": knn,
        "fusion": fuse(clips.parametric, knn, store.fusion_weight),
    }
    out = {}
    for mode, predicted in scores.items():
        out[f"{mode}_rmse"] = rmse(predicted, clips.labels)
        out[f"{mode}_srcc"] = float(stats.spearmanr(predicted.numpy(), clips.labels.numpy())[0])
    if constant is not None:
        out["constant_rmse"] = rmse(torch.full_like(clips.labels, constant), clips.labels)
    return out


def build_datastore(predictor: MOSPredictor, datamodule: MOSDataModule) -> tuple[Datastore, dict[str, Any]]:
    """The datastore of the run's training clips (k, λ chosen on validation) and its run_info record."""
    was_training = predictor.training
    predictor.eval()
    try:
        train = embed_clips(predictor, datamodule, datamodule.train_clips, None)
        systems = sorted({c.system_id for c in datamodule.train_clips})
        system_ids = torch.tensor([systems.index(c.system_id) for c in datamodule.train_clips])
        # Every validation set as one: λ and k are properties of the datastore, not of a set.
        valid_clips = [c for clips in datamodule.corpus.valid_sets().values() for c in clips]
        valid = embed_clips(predictor, datamodule, valid_clips, datamodule.eval_max_seconds)
        probe = Datastore(train.embeddings, train.labels, train.domains, system_ids, 1, 1.0)
        k, _ = choose_k(probe, valid.embeddings, valid.labels)
        weight, _ = choose_fusion_weight(valid.parametric, probe.knn(valid.embeddings, k), valid.labels)
        store = Datastore(train.embeddings, train.labels, train.domains, system_ids, k, weight)
        constant = float(train.labels.mean())
        tests = {}
        for name, clips in datamodule.corpus.test_sets().items():
            embedded = embed_clips(predictor, datamodule, clips, datamodule.eval_max_seconds)
            tests[name] = _figures(store, embedded, constant)
    finally:
        predictor.train(was_training)
    record = {
        "entries": len(store),
        "embedding_dim": int(store.embeddings.shape[1]),
        "k": store.k,
        "fusion_weight": store.fusion_weight,
        "valid": _figures(store, valid),
        "test": tests,
    }
    log.info(
        "Datastore: %d training clips, k=%d, fusion weight λ=%.2f (validation RMSE parametric %.3f, "
        "kNN %.3f, fusion %.3f)",
        len(store),
        store.k,
        store.fusion_weight,
        record["valid"]["parametric_rmse"],
        record["valid"]["knn_rmse"],
        record["valid"]["fusion_rmse"],
    )
    return store, record
