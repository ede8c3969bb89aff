"""`build`: what the composed config hands the data module, the model and the Lightning module."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import torch

from sqa.data.pitch import F0Extractor
from sqa.exports.format import export_predictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.training.builder import build, read_corpus
from sqa.training.losses import margin_l1
from tests.training.test_selection import compose_train, tiny_run_overrides, write_per_system_corpus

SR = 16000


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    """The per-system corpus with a `lyrics` score on every other clip and two domains."""
    path = write_per_system_corpus(tmp_path_factory.mktemp("builder"))
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = [lines[0] + ",score_lyrics,domain_id"]
    for i, line in enumerate(lines[1:]):
        # Lyrics lower than the overall score, on even rows only; domains alternate.
        lyrics = f"{0.5 + float(line.split(',')[1]) / 2:.2f}" if i % 2 == 0 else ""
        rows.append(f"{line},{lyrics},{'ab'[i % 2]}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def built(manifest, *extra: str):
    """(data module, Lightning module) of the tiny run's config with `extra` overrides."""
    return build(compose_train([*tiny_run_overrides(manifest), *extra]))


def scores(predictor: MOSPredictor) -> torch.Tensor:
    """Scores (3, D) on the predictor's own scale of three random clips."""
    torch.manual_seed(1)
    with torch.no_grad():
        return predictor.to_scale(predictor.eval()(torch.randn(3, 8000), torch.tensor([8000] * 3)).scores)


def test_the_data_module_gets_the_f0_extractor_only_for_a_pitch_branch_with_cfg_f0s_settings(manifest):
    datamodule, _ = built(manifest, "model.pitch=intonation", "f0.f0_floor=55.0", "f0.f0_ceil=650.0")
    assert isinstance(datamodule.f0_extractor, F0Extractor)
    assert (datamodule.f0_extractor.f0_floor, datamodule.f0_extractor.f0_ceil) == (55.0, 650.0)
    plain, _ = built(manifest)
    assert plain.f0_extractor is None


def test_dimensions_judges_domains_and_the_scale_reach_the_data_and_the_model(manifest):
    datamodule, module = built(
        manifest, "model.dimensions=[mos,lyrics]", "data.corpus.score_range=[0,10]", "head_init=train_mean"
    )
    assert datamodule.dimensions == ["mos", "lyrics"] == module.predictor.dimensions
    assert module.predictor.score_range == (0.0, 10.0)
    # The head starts at each dimension's training mean, lyrics over the clips that have a score.
    train = datamodule.train_clips
    mos = np.mean([c.mos for c in train])
    lyrics = np.mean([c.extra_scores["lyrics"] for c in train if "lyrics" in c.extra_scores])
    assert abs(mos - lyrics) > 0.1
    assert scores(module.predictor).numpy() == pytest.approx(np.array([[mos, lyrics]] * 3), abs=1e-4)
    branched, module = built(manifest, "model.judge_dim=4", "model.domain_dim=3")
    assert branched.judges is not None
    assert module.predictor.config.num_domains == 2
    assert module.predictor.config.num_judges == branched.num_judges
    plain, _ = built(manifest)
    assert plain.dimensions == ["mos"] and plain.judges is None


def test_the_module_gets_the_configs_loss_optimizer_seed_bootstrap_sets_selection_and_finetune(manifest):
    datamodule, module = built(
        manifest,
        "seed=7",
        "bootstrap=33",
        "loss.margin=0.25",
        "optim.lr=0.02",
        "selection.metric=ktau",
        "selection.fallback=null",
        "finetune.freeze_backbone_steps=3",
        "finetune.backbone_lr_scale=0.5",
        "finetune.anchor=0.2",
        # The fit's stop rule, which the module does not take.
        "finetune.patience_steps=5",
    )
    assert module.loss.func is margin_l1 and module.loss.keywords == {"margin": 0.25}
    assert module.optimizer_factory.func is torch.optim.Adam
    assert module.optimizer_factory.keywords == {"lr": 0.02}
    assert (module.seed, module.bootstrap) == (7, 33)
    assert module.valid_names == datamodule.valid_names and module.valid_names
    assert module.test_names == datamodule.test_names and module.test_names
    assert module.selection.metric == "ktau"
    assert (module.freeze_backbone_steps, module.backbone_lr_scale) == (3, 0.5)
    assert module.anchor is not None and module.anchor.weight == 0.2


def test_a_corpus_already_read_is_used_as_it_is(manifest):
    cfg = compose_train(tiny_run_overrides(manifest))
    corpus = read_corpus(cfg)
    fewer = dataclasses.replace(corpus, clips=[c for c in corpus.clips if c.system_id != "tr0"])
    datamodule, _ = build(cfg, corpus=fewer)
    assert {c.system_id for c in datamodule.train_clips} == {"tr1", "tr2", "tr3", "tr4", "tr5"}


def shifted(predictor: MOSPredictor) -> MOSPredictor:
    """`predictor` with every weight moved by 1, so that a copied module differs from a fresh one."""
    with torch.no_grad():
        for value in predictor.state_dict().values():
            value += 1.0
    return predictor


def module_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether two modules hold the same weights."""
    return all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


@pytest.mark.parametrize("source", ["export", "model.pt", "run directory", "bare model.pt"])
def test_init_from_copies_the_named_modules_from_each_kind_of_checkpoint(manifest, tmp_path, source):
    _, module = built(manifest)
    trained = shifted(module.predictor)
    export = tmp_path / "run" / "export"
    export_predictor(trained, export, sample_rate=SR, domains=["a", "b"])
    checkpoint = {
        "export": export,
        "model.pt": export / "model.pt",
        "run directory": tmp_path / "run",
        "bare model.pt": tmp_path / "bare",
    }[source]
    if source == "bare model.pt":
        # Weights without a config.yaml, checked against this predictor's own architecture.
        checkpoint.mkdir()
        torch.save(trained.state_dict(), checkpoint / "model.pt")
    _, started = built(manifest, f"init_from={{checkpoint: {checkpoint}, modules: [head]}}")
    assert module_equal(started.predictor.head, trained.head)
    assert not module_equal(started.predictor.backbone, trained.backbone)


def test_an_exports_own_architecture_is_built_with_its_f0_settings_when_init_from_asks(
    manifest, tmp_path, caplog
):
    torch.manual_seed(0)
    source = MOSPredictor(LogMelBackbone(channels=16, conv_layers=1), head_dim=8, pitch="intonation")
    export = tmp_path / "source"
    f0 = F0Extractor(f0_floor=60.0, f0_ceil=500.0)
    export_predictor(source, export, sample_rate=SR, domains=["default"], f0_extractor=f0)
    with caplog.at_level(logging.INFO, logger="sqa.training.builder"):
        datamodule, module = built(
            manifest, f"init_from={{checkpoint: {export}, architecture: export, modules: [backbone, head]}}"
        )
    assert module.predictor.config.head_dim == 8 and module.predictor.backbone.output_dim == 16
    assert module_equal(module.predictor.head, source.head)
    assert (datamodule.f0_extractor.f0_floor, datamodule.f0_extractor.f0_ceil) == (60.0, 500.0)
    assert f"Model: the architecture of {export} (init_from.architecture=export)" in caplog.messages
