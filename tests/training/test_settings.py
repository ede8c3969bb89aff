"""SingMOS-Pro settings: domain ID, MDF (train_domains, init_from), pitch branches end to end."""

from __future__ import annotations

import csv

import pytest
import torch
from hydra import compose, initialize_config_dir

from sqa.data.synthetic import load_synthetic
from sqa.exports.format import ExportError, export_predictor, load_export
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.scoring import cli as score
from sqa.training.datamodule import MOSDataModule
from sqa.training.run import init_from, run
from tests.conftest import REPO


def small(**kwargs) -> MOSPredictor:
    return MOSPredictor(LogMelBackbone(n_mels=16, channels=8, conv_layers=1), **kwargs)


def test_init_from_copies_only_the_named_modules(tmp_path):
    torch.manual_seed(0)
    source, target = small(), small()
    export_predictor(source, tmp_path / "stage1", 16000, ["d"])
    head_before = {k: v.clone() for k, v in target.head.state_dict().items()}
    init_from(target, tmp_path / "stage1", ["backbone"])
    for key, value in source.backbone.state_dict().items():
        torch.testing.assert_close(target.backbone.state_dict()[key], value)
    for key, value in head_before.items():
        torch.testing.assert_close(target.head.state_dict()[key], value)
    with pytest.raises(ValueError, match="no complete weights for module 'domain'"):
        init_from(small(num_domains=3, domain_dim=4), tmp_path / "stage1", ["domain"])
    with pytest.raises(ValueError, match="shape"):
        init_from(small(num_domains=3, domain_dim=4), tmp_path / "stage1", ["head"])
    with pytest.raises(FileNotFoundError, match="missing"):
        init_from(target, tmp_path / "missing", ["head"])


class _Payload:
    """Unpickling it would create `marker` (stands for any code a hostile pickle runs)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_init_from_reads_only_plain_weights(tmp_path):
    marker = tmp_path / "ran"
    hostile = tmp_path / "model.pt"
    torch.save({"head.0.weight": _Payload(marker)}, hostile)
    with pytest.raises(ExportError, match="not a plain tensor state_dict"):
        init_from(small(), hostile, ["head"])
    assert not marker.exists()


def test_domain_embedding_changes_the_score_and_is_required():
    torch.manual_seed(0)
    model = small(num_domains=3, domain_dim=4).eval()
    wav, lengths = torch.randn(1, 4000), torch.tensor([4000])
    scores = [model(wav, lengths, torch.tensor([d])).score.item() for d in range(3)]
    assert len(set(scores)) == 3
    with pytest.raises(ValueError, match="domain IDs"):
        model(wav, lengths)


def test_train_domains_restricts_training_to_those_batches(synthetic_root):
    corpus = load_synthetic(synthetic_root)
    dm = MOSDataModule(corpus, train_domains=["singmospro-p1"])
    assert {c.domain for c in dm.train_dataloader().dataset.clips} == {"singmospro-p1"}
    assert len(dm.val_dataloader()) == 5  # validation still covers every batch
    with pytest.raises(ValueError, match="not in the corpus"):
        MOSDataModule(corpus, train_domains=["p9"]).train_dataloader()


@pytest.mark.slow
@pytest.mark.parametrize("pitch", ["midi", "histogram", "intonation"])
def test_pitch_and_domain_model_trains_exports_and_scores_alike(pitch, synthetic_root, tmp_path):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"data.corpus.root={synthetic_root}",
                f"model.pitch={pitch}",
                "model.domain_dim=16",
                f"f0.cache_dir={tmp_path / 'f0'}",
                "trainer.max_steps=20",
                "trainer.val_check_interval=10",
                "trainer.enable_progress_bar=false",
            ],
        )
    run(cfg, tmp_path / "run")
    with (tmp_path / "run" / "predictions.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    domain_of = {"test1": "singmospro-p1", "test2": "singmospro-p2", "test3": "singmospro-p3"}
    for test_set in ("test1", "test3"):
        part = [r for r in rows if r["test_set"] == test_set][:4]
        wavs = [str(synthetic_root / "wav" / f"{r['sample_id']}.wav") for r in part]
        out = tmp_path / f"{test_set}.csv"
        args = [
            "--checkpoint",
            str(tmp_path / "run" / "export"),
            "--output",
            str(out),
            "--domain",
            domain_of[test_set],
        ]
        assert score.main([*args, *wavs]) == 0
        with out.open() as fh:
            scored = [float(r["score"]) for r in csv.DictReader(fh)]
        assert scored == pytest.approx([float(r["pred"]) for r in part], abs=1e-4)
    assert score.main(["--checkpoint", str(tmp_path / "run" / "export"), "--domain", "nope", wavs[0]]) == 2


def rewritten(export, change) -> None:
    """The export's model.pt rewritten with `change` applied to its state_dict."""
    state = torch.load(export / "model.pt", weights_only=True)
    change(state)
    torch.save(state, export / "model.pt")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (
            lambda t: torch.full_like(t, 1e300, dtype=torch.float64),
            "NaN or infinite values once cast to torch.float32",
        ),
        (
            lambda t: torch.ones_like(t, dtype=torch.int64),
            "holds torch.int64 values; the architecture needs torch.float32",
        ),
        (lambda t: torch.ones_like(t, dtype=torch.bool), "holds torch.bool values"),
    ],
)
@pytest.mark.parametrize("bare", [False, True])
def test_init_from_refuses_start_weights_an_export_load_refuses(tmp_path, value, fragment, bare):
    torch.manual_seed(0)
    model = small()
    export = export_predictor(model, tmp_path / "stage1", 16000, ["d"])
    rewritten(export, lambda s: s.__setitem__("head.0.weight", value(s["head.0.weight"])))
    source = export
    if bare:
        # A model.pt without its config.yaml is checked against the model it starts.
        source = tmp_path / "bare" / "model.pt"
        source.parent.mkdir()
        source.write_bytes((export / "model.pt").read_bytes())
    target = small()
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(ExportError, match=fragment):
        init_from(target, source, ["head"])
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())
    # The same file refused by the export load: one check at both entrances.
    if not bare:
        with pytest.raises(ExportError, match=fragment):
            load_export(export)
    # Float weights of another precision, finite once cast, are taken as an export load takes them.
    clean = model.state_dict()["head.0.weight"]
    rewritten(export, lambda s: s.__setitem__("head.0.weight", clean.double()))
    if bare:
        source.write_bytes((export / "model.pt").read_bytes())
    init_from(target, source, ["head"])
    assert torch.equal(target.state_dict()["head.0.weight"], clean)


def test_init_from_bounds_the_archive_before_reading_it(tmp_path, monkeypatch):
    import zipfile

    torch.manual_seed(0)
    export = export_predictor(small(), tmp_path / "stage1", 16000, ["d"])
    weights = export / "model.pt"
    # Records that deflate: a few KB on disk that inflate to 64 MiB.
    with zipfile.ZipFile(weights, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("model/data/big", bytes(64 << 20))
    assert weights.stat().st_size < 1 << 20
    loaded = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: loaded.append(a))
    with pytest.raises(ExportError, match="compressed records"):
        init_from(small(), export, ["head"])
    # Stored records larger than the architecture's tensors: refused by their declared size.
    torch.save({**small().state_dict(), "extra": torch.zeros(2 << 20)}, weights)
    for source in (export, weights):
        with pytest.raises(ExportError, match="declares .* bytes uncompressed"):
            init_from(small(), source, ["head"])
    bare = tmp_path / "model.pt"
    bare.write_bytes(weights.read_bytes())
    with pytest.raises(ExportError, match="declares .* bytes uncompressed"):
        init_from(small(), bare, ["head"])
    assert loaded == []
