"""Every model family is a `Predictor`; each conf/model config trains a step, exports, loads, scores alike."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import sqa
from sqa.exports.format import export_predictor, load_export
from sqa.exports.targets import PREDICTOR_CLASSES, PREDICTOR_TARGETS
from sqa.models.aligner import AlignedPredictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.calibrated import CalibratedPredictor
from sqa.models.config import constructor_parameters
from sqa.models.distillmos import DistillMosBackbone, DistillMosZeroShot
from sqa.models.ensemble import EnsemblePredictor
from sqa.models.interface import Predictor
from sqa.models.predictor import INTERNAL_RANGE, MOSPredictor
from sqa.models.uncertainty import UncertainMOSPredictor
from tests.conftest import REPO

SR = 16_000
# Not 1-5: the maps to and from the internal scale are then no identity.
SCORE_RANGE = (0.0, 10.0)
DOMAINS = ["a", "b"]
MODEL_CONFIGS = sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml"))


def compose_model(name: str):
    """The train config with model=`name`; a family with a spread trains with its likelihood loss."""
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"model={name}"])
        if "distribution" in cfg.model:
            cfg = compose("train", overrides=[f"model={name}", f"loss={cfg.model.distribution}_nll"])
    return cfg


def tiny_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three noise clips of 1, 0.75 and 0.5 s padded into one batch, of domains 0, 1 and 1."""
    lengths = torch.tensor([SR, 3 * SR // 4, SR // 2])
    wav = 0.3 * torch.randn(3, SR, generator=torch.Generator().manual_seed(0))
    wav = wav * (torch.arange(SR)[None, :] < lengths[:, None])
    return wav, lengths, torch.tensor([0, 1, 1])


@pytest.mark.parametrize("name", MODEL_CONFIGS)
def test_every_model_config_trains_a_step_exports_and_scores_as_itself(name, tmp_path):
    cfg = compose_model(name)
    if (cfg.model.get("pretrained") or cfg.model.backbone.get("pretrained")) and (
        importlib.util.find_spec("distillmos") is None
    ):
        pytest.skip("the config loads the distillmos package's weights: pip install 'sqa[distillmos]'")
    predictor = instantiate(cfg.model, num_domains=len(DOMAINS), num_judges=0, score_range=list(SCORE_RANGE))
    assert isinstance(predictor, Predictor)
    assert type(predictor).export_target() in PREDICTOR_TARGETS

    # The rating scale's ends are the internal scale's, both ways.
    assert predictor.score_range == SCORE_RANGE
    ends, internal = torch.tensor(SCORE_RANGE), torch.tensor(INTERNAL_RANGE)
    assert torch.allclose(predictor.to_internal(ends), internal)
    assert torch.allclose(predictor.to_scale(internal), ends)

    # One optimisation step, with labels at the scale's ends: far from any start, so the loss has a gradient.
    wav, lengths, domain = tiny_batch()
    dimensions = len(predictor.dimensions)
    labels = torch.tensor([SCORE_RANGE[0], SCORE_RANGE[1], SCORE_RANGE[1]])
    target = predictor.to_internal(labels if dimensions == 1 else labels[:, None].expand(-1, dimensions))
    head = {
        n: p for n, p in predictor.named_parameters() if p.requires_grad and not n.startswith("backbone.")
    }
    before = {n: p.detach().clone() for n, p in head.items()}
    optimizer = instantiate(cfg.optim)([p for p in predictor.parameters() if p.requires_grad])
    predictor.train()
    out = predictor(wav, lengths, domain)
    assert out.scores.shape == (3, dimensions)
    instantiate(cfg.loss)(out, target).backward()
    assert head, "the family has no trainable parameters outside its backbone"
    for n, p in head.items():
        assert p.grad is not None and torch.isfinite(p.grad).all(), f"no gradient reaches {n}"
    assert any(p.grad.abs().sum() > 0 for p in head.values())
    optimizer.step()
    assert any(not torch.equal(p, before[n]) for n, p in head.items())

    # Exported and loaded: the same architecture and weights, and the scorer's score is the predictor's own.
    predictor.eval()
    clip = np.random.default_rng(1).uniform(-0.3, 0.3, 3 * SR // 2).astype(np.float32)
    scored_domain = 1 if predictor.domain_count is not None else None
    with torch.no_grad():
        ids = None if scored_domain is None else torch.tensor([scored_domain])
        own = predictor.to_scale(
            predictor(torch.from_numpy(clip)[None], torch.tensor([clip.size]), ids).score
        )
    export_predictor(predictor, tmp_path / "export", SR, DOMAINS)
    loaded, config, _ = load_export(tmp_path / "export")
    assert type(loaded) is type(predictor) and config["model"] == predictor.export_config()
    state = loaded.state_dict()
    assert all(torch.equal(state[k], v) for k, v in predictor.state_dict().items())
    score = sqa.load(tmp_path / "export", domain=scored_domain).score(clip, SR)
    assert score == pytest.approx(float(own[0]), abs=1e-5)

    # The training-mean start: every clip then scores the means (domain 0: the aligner's reference).
    means = [SCORE_RANGE[0] + 0.3 * (SCORE_RANGE[1] - SCORE_RANGE[0])] * dimensions
    try:
        predictor.start_at(means)
    except ValueError as err:
        assert "head_init=train_mean" in str(err)
    else:
        with torch.no_grad():
            started = predictor.to_scale(predictor(wav, lengths, torch.zeros_like(domain)).scores)
        assert torch.allclose(started, torch.tensor(means).expand_as(started), atol=1e-4)


def tiny_distillmos() -> DistillMosBackbone:
    """A random-init Distill-MOS network of the smallest sizes (no package weights)."""
    return DistillMosBackbone(channels=8, conv_layers=2, dim=16, heads=2, layers=1)


def tiny_logmel() -> LogMelBackbone:
    """A log-mel backbone of the smallest sizes."""
    return LogMelBackbone(n_mels=16, channels=8)


# Each family an export may name, built small; the ensemble holds two of the others.
FAMILIES = {
    MOSPredictor: lambda: MOSPredictor(tiny_logmel(), head_dim=8),
    UncertainMOSPredictor: lambda: UncertainMOSPredictor(tiny_logmel(), head_dim=8, distribution="laplace"),
    AlignedPredictor: lambda: AlignedPredictor(tiny_logmel(), head_dim=8, num_domains=2),
    DistillMosZeroShot: lambda: DistillMosZeroShot(tiny_distillmos()),
    CalibratedPredictor: lambda: CalibratedPredictor(tiny_distillmos(), score_range=[0, 100]),
    EnsemblePredictor: lambda: EnsemblePredictor(
        [FAMILIES[MOSPredictor](), FAMILIES[MOSPredictor]()], [[0.5, 0.5]], [0.0]
    ),
}


def test_every_family_an_export_may_name_implements_the_predictor_interface():
    assert set(FAMILIES) == {*PREDICTOR_CLASSES, EnsemblePredictor}
    wav, lengths, domain = tiny_batch()
    for family, build in FAMILIES.items():
        predictor = build()
        assert isinstance(predictor, Predictor), family.__name__
        with torch.no_grad():
            out = predictor(wav, lengths, domain)
        assert out.scores.shape == (3, len(predictor.dimensions)), family.__name__
    assert not isinstance(torch.nn.Linear(2, 2), Predictor)


def test_a_family_that_adds_to_mospredictor_takes_and_checks_its_arguments():
    base = constructor_parameters(MOSPredictor)
    assert constructor_parameters(AlignedPredictor) == base
    uncertain = constructor_parameters(UncertainMOSPredictor)
    assert set(uncertain) == {*base, "distribution", "error_spread"}
    # The annotations an export's values are checked against are the base's.
    assert uncertain["head_dim"].annotation == base["head_dim"].annotation == "int"
    aligned = AlignedPredictor(tiny_logmel(), head_dim=8, dropout=0.1, num_domains=3, score_range=[0, 10])
    assert (aligned.config.head_dim, aligned.config.dropout, aligned.domain_count) == (8, 0.1, 3)
    spread = UncertainMOSPredictor(tiny_logmel(), head_dim=8, score_range=[0, 10], error_spread=True)
    assert spread.score_range == (0.0, 10.0) and spread.spread_head[0].out_features == 8
