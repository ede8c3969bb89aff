"""Ensembles (`sqa-ensemble`): the mean and ridge weights, one export that scores and evaluates as any."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import sqa
from sqa.data.synthetic import load_synthetic
from sqa.exports.config import ExportError, read_export_config
from sqa.exports.format import export_predictor, load_export, read_architecture
from sqa.models.backbone import LogMelBackbone
from sqa.models.ensemble import EnsemblePredictor
from sqa.models.predictor import MOSPredictor
from sqa.training.ensemble import EnsembleError, build_ensemble, fit_ridge, main
from sqa.training.evaluation import evaluate
from tests.conftest import SMALL_CLIPS_PER_SYSTEM
from tests.training.test_eval import assert_same, compose_eval


def tiny_predictor(seed: int, score_range: tuple[float, float] = (1.0, 5.0)) -> MOSPredictor:
    """A random-init log-mel predictor, made to score around 3 with clip-to-clip spread."""
    torch.manual_seed(seed)
    model = MOSPredictor(LogMelBackbone(channels=16, conv_layers=1), head_dim=8, score_range=score_range)
    with torch.no_grad():
        model.head[-1].weight.mul_(4.0)
    return model.eval()


def export_member(
    model: MOSPredictor,
    directory: Path,
    corpus_root: Path | None,
    sample_rate: int = 16000,
    vocal_only: bool = False,
) -> Path:
    """`model` exported as a run of the small synthetic corpus at `corpus_root` would record it."""
    data = None
    if corpus_root is not None:
        corpus = {
            "_target_": "sqa.data.synthetic.load_synthetic",
            "root": os.path.relpath(corpus_root, directory),
            "seed": 0,
            "clips_per_system": SMALL_CLIPS_PER_SYSTEM,
        }
        data = {"name": "synthetic", "corpus": corpus, "eval_batch_size": 8}
    return export_predictor(
        model,
        directory,
        sample_rate,
        ["p1", "p2", "p3", "p4", "p5"],
        data=data,
        test={"seed": 0, "bootstrap": 0},
        vocal_only=vocal_only,
    )


@pytest.fixture(scope="module")
def members(small_synthetic_root, tmp_path_factory) -> list[Path]:
    """Three member exports of different seeds, recording the small synthetic corpus."""
    folder = tmp_path_factory.mktemp("members")
    return [
        export_member(tiny_predictor(seed), folder / f"seed{seed}", small_synthetic_root) for seed in range(3)
    ]


@pytest.fixture(scope="module")
def clips(small_synthetic_root) -> list[str]:
    """Paths of a few clips of unequal lengths and rates (validation clips of the small corpus)."""
    corpus = load_synthetic(small_synthetic_root, seed=0, clips_per_system=SMALL_CLIPS_PER_SYSTEM)
    return [str(c.path) for c in corpus.split("valid")]


def test_mean_ensemble_scores_the_mean_of_its_members_in_any_batch(members, clips, tmp_path):
    assert main([*map(str, members), "--output", str(tmp_path / "ens")]) == 0
    config = yaml.safe_load((tmp_path / "ens" / "config.yaml").read_text())
    assert config["model"]["weights"] == [[1 / 3] * 3] and config["model"]["intercept"] == [0.0]
    own = np.array([sqa.load(m).score(clips[:6]) for m in members])
    ensemble = sqa.load(tmp_path / "ens", batch_size=4)
    batched = ensemble.score(clips[:6])
    assert own.std(axis=0).min() > 0.01  # the members disagree: a wrong combination shows
    assert batched == pytest.approx(own.mean(axis=0).tolist(), abs=1e-5)
    assert batched == pytest.approx([ensemble.score(c) for c in clips[:6]], abs=1e-5)
    card = (tmp_path / "ens" / "README.md").read_text()
    assert "an ensemble of 3 (LogMelBackbone)" in card and "## Members" in card
    for name in ("seed0", "seed1", "seed2"):
        assert f"| `{name}` | LogMelBackbone |" in card
    # One model.pt holds every member: the members' folders are not needed to score it.
    assert {p.name for p in (tmp_path / "ens").iterdir()} >= {"model.pt", "config.yaml", "metrics.json"}
    state = torch.load(tmp_path / "ens" / "model.pt", weights_only=True)
    assert {k.split(".")[1] for k in state} == {"0", "1", "2"}


def test_ridge_weights_are_those_of_a_reference_ridge_fit(members, small_synthetic_root, tmp_path):
    linear_model = pytest.importorskip("sklearn.linear_model")
    assert (
        main([*map(str, members), "--output", str(tmp_path / "ens"), "--method", "ridge", "--alpha", "0.5"])
        == 0
    )
    config = yaml.safe_load((tmp_path / "ens" / "config.yaml").read_text())
    corpus = load_synthetic(small_synthetic_root, seed=0, clips_per_system=SMALL_CLIPS_PER_SYSTEM)
    valid = [c for clips in corpus.valid_sets().values() for c in clips]
    x = np.array([sqa.load(m).score([str(c.path) for c in valid]) for m in members]).T
    y = np.array([c.mos for c in valid])
    reference = linear_model.Ridge(alpha=0.5).fit(x, y)
    assert config["model"]["weights"][0] == pytest.approx(reference.coef_.tolist(), abs=1e-4)
    assert config["model"]["intercept"][0] == pytest.approx(reference.intercept_, abs=1e-4)
    weights, intercept = fit_ridge(x, y, 0.5)
    assert weights == pytest.approx(reference.coef_, abs=1e-8) and intercept == pytest.approx(
        reference.intercept_
    )
    # Not the mean: the fit moved the weights.
    assert max(abs(w - 1 / 3) for w in config["model"]["weights"][0]) > 0.01
    # Scored whole and in chunks (frame scores), the intercept plus the weighted members' scores.
    w, b = np.array(config["model"]["weights"][0]), config["model"]["intercept"][0]
    few = [str(c.path) for c in valid[:4]]
    for chunk in (None, 0.5):
        own = np.array([sqa.load(m, chunk_seconds=chunk).score(few) for m in members]).T
        got = sqa.load(tmp_path / "ens", chunk_seconds=chunk).score(few)
        assert got == pytest.approx((b + own @ w).tolist(), abs=1e-5)
    info = json.loads((tmp_path / "ens" / "run_info.json").read_text())["ensemble"]
    assert info["method"] == "ridge" and info["alpha"] == 0.5 and info["validation_clips"] == len(valid)


def test_eval_of_an_ensemble_reproduces_its_metrics(members, tmp_path):
    ensemble = build_ensemble(members, tmp_path / "ens")
    expected = json.loads((ensemble / "metrics.json").read_text())
    assert expected["avg"]["utt"]["n"] > 0
    results = evaluate(compose_eval([f"export={ensemble}"]), tmp_path / "eval")
    assert_same(results, expected)


def test_members_that_cannot_join_are_named(members, small_synthetic_root, tmp_path):
    other_scale = export_member(tiny_predictor(5, (0.0, 100.0)), tmp_path / "mushra", small_synthetic_root)
    with pytest.raises(EnsembleError, match=f"{other_scale}.* rates on \\[0.0, 100.0\\]"):
        build_ensemble([members[0], other_scale], tmp_path / "a")
    other_rate = export_member(tiny_predictor(6), tmp_path / "rate", small_synthetic_root, sample_rate=24000)
    with pytest.raises(EnsembleError, match=f"{other_rate}: scores audio at 24000 Hz"):
        build_ensemble([members[0], other_rate], tmp_path / "b")
    no_corpus = export_member(tiny_predictor(7), tmp_path / "nocorpus", None)
    with pytest.raises(EnsembleError, match=f"{no_corpus}: records no corpus with validation clips"):
        build_ensemble([members[0], no_corpus], tmp_path / "c", method="ridge")
    # The mean needs no corpus: written without test metrics or a corpus record.
    mean = build_ensemble([members[0], no_corpus], tmp_path / "d")
    assert yaml.safe_load((mean / "config.yaml").read_text())["data"] is None
    with pytest.raises(EnsembleError, match="is itself an ensemble"):
        build_ensemble([mean, members[1]], tmp_path / "e")
    with pytest.raises(ExportError, match="is an ensemble"):
        read_architecture(mean)
    assert not any((tmp_path / name).exists() for name in "abce")


def test_an_ensemble_of_vocal_only_members_records_vocal_only_and_a_mix_is_refused(tmp_path):
    vocal = [export_member(tiny_predictor(s), tmp_path / f"v{s}", None, vocal_only=True) for s in (0, 1)]
    ensemble = build_ensemble(vocal, tmp_path / "ens")
    assert read_export_config(ensemble / "config.yaml")["vocal_only"] is True
    # Scoring follows the recorded setting: the ensemble trims as its members were trained.
    assert sqa.load(ensemble).vocal_only is True
    plain = build_ensemble(
        [export_member(tiny_predictor(s), tmp_path / f"p{s}", None) for s in (2, 3)], tmp_path / "p"
    )
    assert read_export_config(plain / "config.yaml")["vocal_only"] is False
    mixed = export_member(tiny_predictor(4), tmp_path / "mixed", None)
    with pytest.raises(
        EnsembleError, match=f"{mixed}: was trained with vocal_only=False, .* vocal_only=True"
    ):
        build_ensemble([vocal[0], mixed], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_member_with_weights_an_export_load_refuses_is_refused(tmp_path):
    member = export_member(tiny_predictor(0), tmp_path / "m0", None)
    other = export_member(tiny_predictor(1), tmp_path / "m1", None)
    state = torch.load(other / "model.pt", weights_only=True)
    state["head.0.weight"] = torch.full_like(state["head.0.weight"], 1e300, dtype=torch.float64)
    torch.save(state, other / "model.pt")
    with pytest.raises(
        ExportError, match="'head.0.weight' holds NaN or infinite values once cast to torch.float32"
    ):
        build_ensemble([member, other], tmp_path / "ens")
    assert not (tmp_path / "ens").exists()


def test_an_existing_folder_and_a_members_folder_are_never_replaced(members, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="already exists"):
        build_ensemble(members[:2], mine)
    with pytest.raises(ExportError):
        build_ensemble(members[:2], mine, overwrite=True)
    with pytest.raises(ExportError):
        build_ensemble(members[:2], members[1].parent, overwrite=True)
    assert (mine / "notes.txt").read_text() == "mine" and members[1].is_dir()


def test_an_ensemble_config_is_checked_member_by_member(members, tmp_path):
    ensemble = build_ensemble(members[:2], tmp_path / "ens")
    config = yaml.safe_load((ensemble / "config.yaml").read_text())
    # Kept by hand: forged edits of a real ensemble's config.yaml, which no sqa writer makes.
    bad = {
        "os.system member": {"_target_": "os.system", "command": "true"},
        "nested ensemble": dict(config["model"]),
        "member path": {**config["model"]["members"][0], "checkpoint": "/etc/passwd"},
    }
    for name, member in bad.items():
        changed = json.loads(json.dumps(config))
        changed["model"]["members"][1] = member
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(changed))
        with pytest.raises(ExportError):
            read_export_config(tmp_path / f"{name}.yaml")
    changed = json.loads(json.dumps(config))
    changed["model"]["weights"] = [[float("nan"), 0.5]]
    (tmp_path / "nan.yaml").write_text(yaml.safe_dump(changed))
    with pytest.raises(ExportError, match="finite"):
        read_export_config(tmp_path / "nan.yaml")
    predictor, _, _ = load_export(ensemble)
    assert isinstance(predictor, EnsemblePredictor) and len(predictor.members) == 2
    # Built (on the meta device) before any weight is read: one member is no ensemble.
    single = tmp_path / "single"
    shutil.copytree(ensemble, single)
    changed = json.loads(json.dumps(config))
    changed["model"].update(members=changed["model"]["members"][:1], weights=[[1.0]])
    (single / "config.yaml").write_text(yaml.safe_dump(changed))
    with pytest.raises(ExportError, match="an ensemble holds 2 to 32 members, got 1"):
        load_export(single)


@pytest.mark.slow
def test_an_ensemble_of_three_seeds_scores_at_least_their_mean(synthetic_root, tmp_path):
    from sqa.training.run import run
    from tests.training.test_train import DEFAULT_RUN_STEPS, compose_train

    runs = []
    for seed in range(3):
        overrides = [
            f"data.corpus.root={synthetic_root}",
            "trainer.enable_progress_bar=false",
            f"trainer.max_steps={DEFAULT_RUN_STEPS}",
            f"seed={seed}",
        ]
        run(compose_train(overrides), tmp_path / f"seed{seed}")
        runs.append(tmp_path / f"seed{seed}")
    own = [json.loads((r / "metrics.json").read_text())["avg"] for r in runs]
    for method in ("mean", "ridge"):
        ensemble = build_ensemble(runs, tmp_path / method, method=method)
        got = json.loads((ensemble / "metrics.json").read_text())["avg"]
        for level in ("utt", "sys"):
            assert got[level]["srcc"] >= np.mean([m[level]["srcc"] for m in own]), (method, level)
            assert got[level]["rmse"] <= np.mean([m[level]["rmse"] for m in own]), (method, level)


def test_members_of_different_domain_counts_score_only_the_domains_every_member_embeds(clips, tmp_path):
    # Three domains, none, and two: the ensemble scores p1 and p2 (each member's own score of that
    # domain, averaged), refuses p3 by name, and its mean over domains is over p1 and p2.
    models = []
    for seed, count in ((0, 3), (1, None), (2, 2)):
        torch.manual_seed(seed)
        backbone = LogMelBackbone(channels=16, conv_layers=1)
        model = MOSPredictor(backbone, head_dim=8, num_domains=count or 1, domain_dim=4 if count else 0)
        with torch.no_grad():
            model.head[-1].weight.mul_(4.0)
        models.append(model.eval())
    ensemble = EnsemblePredictor(models, [[1 / 3] * 3], [0.0])
    assert ensemble.domain_count == 2 and ensemble.domain.embedding.num_embeddings == 2
    domains = ["p1", "p2", "p3"]
    path = export_predictor(ensemble, tmp_path / "ens", 16000, domains)
    alone = [export_predictor(m, tmp_path / f"m{i}", 16000, domains) for i, m in enumerate(models)]
    with pytest.raises(ValueError, match=r"domain 'p3' \(index 2\).*its model embeds only 2"):
        sqa.load(path, domain="p3")
    per_domain = []
    for name in ("p1", "p2"):
        own = np.array(
            [sqa.load(m, domain=name if i != 1 else None).score(clips[:3]) for i, m in enumerate(alone)]
        )
        scored = sqa.load(path, domain=name).score(clips[:3])
        assert scored == pytest.approx(own.mean(axis=0).tolist(), abs=1e-5)
        per_domain.append(scored)
    assert np.abs(np.subtract(*per_domain)).max() > 1e-3  # the domain changes the scores
    mean = sqa.load(path, domain="mean").score(clips[:3])
    assert mean == pytest.approx(np.mean(per_domain, axis=0).tolist(), abs=1e-5)
