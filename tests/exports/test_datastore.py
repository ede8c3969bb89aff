"""An export's datastore.pt: scored by in knn, fusion and neighbour-domain modes, and refused when hostile.

Hostile datastores are refused as model.pt is (tests/exports/test_export_security.py): naming
the file, before anything is scored, and a pickled payload never runs.
"""

from __future__ import annotations

import csv
import json
import math
import pickle
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from sqa.exports import datastore as datastore_file
from sqa.exports.format import ExportError, export_predictor
from sqa.models import retrieval
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.models.retrieval import Datastore, pooled_embedding
from sqa.scoring import cli as score_cli
from sqa.scoring.pieces import QUERY_NOT_FINITE
from sqa.scoring.scorer import ClipWarning, Scorer
from tests.exports.test_export_security import Payload, rewrite_archive

SR = 16000


def predictor(num_domains: int = 1) -> MOSPredictor:
    torch.manual_seed(0)
    domain_dim = 4 if num_domains > 1 else None
    backbone = LogMelBackbone(n_mels=16, channels=8)
    return MOSPredictor(backbone, num_domains=num_domains, domain_dim=domain_dim).eval()


def clips(count: int = 6) -> list[np.ndarray]:
    """Noise clips of 0.5 to 1 s at different loudness, so that their embeddings differ."""
    rng = np.random.default_rng(0)
    return [
        (0.05 * (i + 1) * rng.standard_normal(SR // 2 + 1000 * i)).astype(np.float32) for i in range(count)
    ]


@torch.inference_mode()
def embeddings(model: MOSPredictor, wavs: list[np.ndarray]) -> torch.Tensor:
    rows = []
    for wav in wavs:
        frames, lengths = model.backbone(torch.from_numpy(wav)[None], torch.tensor([wav.shape[0]]))
        rows.append(pooled_embedding(frames, lengths)[0])
    return torch.stack(rows)


LABELS = [1.5, 2.0, 2.5, 3.5, 4.0, 4.5]


def export_with_store(
    tmp_path: Path, model: MOSPredictor, k: int = 1, weight: float = 0.25, domains: list[int] | None = None
) -> Path:
    store = Datastore(
        embeddings(model, clips()),
        torch.tensor(LABELS),
        torch.tensor(domains or [0] * 6),
        torch.arange(6),
        k,
        weight,
    )
    names = ["a", "b"][: model.config.num_domains]
    return export_predictor(model, tmp_path / "exp", SR, names, datastore=store)


def test_knn_on_the_training_clips_returns_their_labels_and_fusion_mixes(tmp_path):
    export = export_with_store(tmp_path, predictor())
    parametric = Scorer(export).score(clips(), SR)
    knn = Scorer(export, mode="knn").score(clips(), SR)
    fusion = Scorer(export, mode="fusion").score(clips(), SR)
    assert knn == pytest.approx(LABELS, abs=1e-6)
    assert fusion == pytest.approx([0.25 * p + 0.75 * y for p, y in zip(parametric, LABELS, strict=True)])


def test_a_datastore_of_finite_1e20_embeddings_scores_real_numbers(tmp_path):
    model = predictor()
    width = embeddings(model, clips(1)).shape[1]
    # Entry i lies at 1e20·(i+1) on every axis: ‖e‖² (1e40·width) overflows float32, but the
    # nearest entry to any ordinary clip embedding is plainly the first.
    huge = torch.arange(1, 7, dtype=torch.float32)[:, None].repeat(1, width) * 1e20
    store = Datastore(huge, torch.tensor(LABELS), torch.zeros(6, dtype=torch.int64), torch.arange(6), 1, 0.25)
    export = export_predictor(model, tmp_path / "exp", SR, ["a"], datastore=store)
    parametric = Scorer(export).score(clips(), SR)
    assert Scorer(export, mode="knn").score(clips(), SR) == [1.5] * 6
    fusion = Scorer(export, mode="fusion").score(clips(), SR)
    assert fusion == pytest.approx([0.25 * p + 0.75 * 1.5 for p in parametric])


def finite_and_overflowing_exports(tmp_path: Path) -> tuple[Path, Path]:
    """Two exports with one datastore: a model, and the same model whose frames overflow float32.

    The second's weights are finite (an export load accepts them), but its last LayerNorm
    (weight and bias 3e38) sends every clip's frames, and so its pooled query, to ±inf or NaN.
    """
    model = predictor()
    labels = torch.tensor(LABELS)
    store = Datastore(
        embeddings(model, clips()), labels, torch.zeros(6, dtype=torch.int64), torch.arange(6), 1, 0.25
    )
    finite = export_predictor(model, tmp_path / "finite", SR, ["a"], datastore=store)
    with torch.no_grad():
        model.backbone.norms[-1].weight.fill_(3e38)
        model.backbone.norms[-1].bias.fill_(3e38)
    return finite, export_predictor(model, tmp_path / "overflow", SR, ["a"], datastore=store)


@pytest.mark.parametrize("mode", ["knn", "fusion"])
def test_a_clip_whose_query_embedding_is_not_finite_scores_none_with_its_reason(tmp_path, mode):
    finite, overflow = finite_and_overflowing_exports(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores = Scorer(finite, mode=mode).score(clips(2), SR)
    assert all(math.isfinite(score) for score in scores)
    if mode == "knn":
        assert scores == pytest.approx(LABELS[:2], abs=1e-6)  # each clip's nearest entry is its own
    with pytest.warns(ClipWarning) as caught:
        assert Scorer(overflow, mode=mode).score(clips(2), SR) == [None, None]
    reason = QUERY_NOT_FINITE.format(mode=mode)
    assert [str(w.message) for w in caught] == [f"audio[0]: {reason}", f"audio[1]: {reason}"]
    # The head alone gives no number either, and says so.
    with pytest.warns(ClipWarning, match="the model gave a NaN or infinite score"):
        assert Scorer(overflow).score(clips(1), SR) == [None]


def test_sqa_score_writes_a_non_finite_query_as_null_with_its_reason(tmp_path, capsys):
    finite, overflow = finite_and_overflowing_exports(tmp_path)
    paths = []
    for i, wav in enumerate(clips(2)):
        paths.append(str(tmp_path / f"clip{i}.wav"))
        sf.write(paths[-1], wav, SR, subtype="FLOAT")
    reason = QUERY_NOT_FINITE.format(mode="knn")
    for export, name in ((finite, "finite"), (overflow, "overflow")):
        for suffix in ("csv", "json"):
            out = tmp_path / f"{name}.{suffix}"
            args = ["--checkpoint", str(export), "--mode", "knn", "--num-workers", "0", "--output", str(out)]
            assert score_cli.main([*args, *paths]) == 0
    with open(tmp_path / "finite.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(row["score"]) for row in rows] == pytest.approx(LABELS[:2], abs=1e-6)
    assert "reason" not in rows[0]
    with open(tmp_path / "overflow.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(row["score"], row["reason"]) for row in rows] == [("", reason), ("", reason)]
    assert [
        (row["score"], row["reason"]) for row in json.loads((tmp_path / "overflow.json").read_text())
    ] == [
        (None, reason),
        (None, reason),
    ]
    assert f"sqa-score: warning: {paths[0]}: {reason}" in capsys.readouterr().err.splitlines()


def test_knn_scores_are_the_same_alone_and_batched(tmp_path):
    export = export_with_store(tmp_path, predictor(), k=3)
    scorer = Scorer(export, mode="knn", batch_size=4)
    together = scorer.score(clips(), SR)
    alone = [scorer.score(clip, SR) for clip in clips()]
    assert together == alone


def test_domains_are_looked_up_from_the_neighbours_and_said(tmp_path):
    model = predictor(num_domains=2)
    export = export_with_store(tmp_path, model, domains=[0, 0, 0, 1, 1, 1])
    scorer = Scorer(export, domain="neighbours")
    assert "nearest training clips" in scorer.domain_note
    # Each training clip is its own nearest neighbour: it scores as its own domain.
    as_domain = [Scorer(export, domain=d).score(clips(), SR) for d in (0, 1)]
    expected = [as_domain[0][i] if i < 3 else as_domain[1][i] for i in range(6)]
    assert scorer.score(clips(), SR) == pytest.approx(expected, abs=1e-6)


def test_modes_without_a_datastore_are_refused_saying_how_to_get_one(tmp_path):
    export = export_predictor(predictor(), tmp_path / "plain", SR, ["a"])
    for kwargs in ({"mode": "knn"}, {"mode": "fusion"}):
        with pytest.raises(ValueError, match="retrieval.datastore=true"):
            Scorer(export, **kwargs)
    with pytest.raises(ValueError, match="mode must be one of"):
        Scorer(export, mode="nearest")
    # The head alone needs none.
    assert isinstance(Scorer(export).score(clips()[0], SR), float)


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return export_with_store(tmp_path, predictor())


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PAYLOAD_RAN"


def refused(export: Path, marker: Path, *fragments: str) -> None:
    with pytest.raises(ExportError) as info:
        Scorer(export, mode="knn")
    message = str(info.value)
    assert "datastore.pt" in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert not marker.exists(), "the payload ran"


def edit_store(export: Path, change) -> None:
    state = torch.load(export / "datastore.pt", weights_only=True)
    change(state)
    torch.save(state, export / "datastore.pt")


def test_a_pickled_payload_is_refused_and_never_runs(export, marker):
    (export / "datastore.pt").write_bytes(pickle.dumps(Payload(marker)))
    refused(export, marker, "not a plain tensor state_dict")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda s: s["labels"].__setitem__(0, math.nan), "'labels' holds NaN or infinite"),
        (lambda s: s["embeddings"].__setitem__((0, 0), math.inf), "'embeddings' holds NaN or infinite"),
        (lambda s: s.__setitem__("labels", s["labels"][:3]), "labels has shape (3,)"),
        (lambda s: s.__setitem__("embeddings", s["embeddings"][:, :4].contiguous()), "4 wide"),
        (lambda s: s.__setitem__("domains", s["domains"].float()), "domains must be a torch.int64"),
        (lambda s: s["labels"].__setitem__(0, 7.0), "outside the model's rating scale"),
        (lambda s: s["domains"].__setitem__(0, 1), "domain IDs reach 1"),
        (lambda s: s.__setitem__("k", torch.tensor(5000)), "k is 5000"),
    ],
)
def test_a_wrong_datastore_is_refused_naming_the_file(change, fragment, export, marker):
    edit_store(export, change)
    refused(export, marker, fragment)


def test_a_linked_datastore_is_refused(export, marker, tmp_path):
    target = tmp_path / "elsewhere.pt"
    (export / "datastore.pt").rename(target)
    (export / "datastore.pt").symlink_to(target)
    refused(export, marker, "symbolic link")


def test_more_entries_than_the_bound_are_refused(export, marker, monkeypatch):
    monkeypatch.setattr(retrieval, "MAX_DATASTORE_ENTRIES", 5)
    refused(export, marker, "holds 6 entries; a datastore holds 1 to 5")


def test_an_archive_declaring_more_than_the_bound_allows_is_refused_before_loading(
    export, marker, monkeypatch
):
    monkeypatch.setattr(datastore_file, "MAX_DATASTORE_ENTRIES", 5)
    allowed = 5 * (4 * 8 + 20) + (1 << 20) + 6 * 1024
    path = export / "datastore.pt"
    with zipfile.ZipFile(path) as archive:
        declared = sum(r.file_size for r in archive.infolist())
        prefix = archive.namelist()[0].split("/")[0]
    rewrite_archive(path, zipfile.ZIP_STORED, {f"{prefix}/data/999": bytes(allowed - declared + 1)})
    refused(export, marker, f"declares {allowed + 1} bytes uncompressed", f"at most {allowed}")
