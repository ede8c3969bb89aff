"""Every experiment composes and its data, model, loss and optimizer instantiate."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import sqa.training
from sqa.models.predictor import MOSPredictor, Prediction

from .conftest import REPO

EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
BACKBONES = sorted(p.stem for p in (REPO / "conf" / "model" / "backbone").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes_and_instantiates(experiment, synthetic_root):
    # Every SingMOS-Pro-layout experiment can read the synthetic corpus (same layout); pretrained
    # weights are replaced by random init of the same architecture.
    overrides = [f"experiment={experiment}", f"data.corpus.root={synthetic_root}"]
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    # keys(): `in` on the config itself is False for a mandatory (???) value.
    if "checkpoint" in cfg.model.backbone.keys():  # noqa: SIM118
        cfg.model.backbone.checkpoint = None
    datamodule = instantiate(cfg.data)
    assert datamodule.test_names == ["test1", "test2", "test3"]
    predictor = instantiate(cfg.model)
    assert isinstance(predictor, MOSPredictor)
    loss = instantiate(cfg.loss)
    optimizer = instantiate(cfg.optim)(predictor.parameters())
    wav = torch.randn(2, 8000)
    out = predictor(wav, torch.tensor([8000, 6000]))
    value = loss(out, torch.tensor([3.0, 4.0]))
    value.backward()
    optimizer.step()
    assert isinstance(out, Prediction) and out.score.shape == (2,) and torch.isfinite(value)


def test_paper_ssl_experiment_matches_the_paper():
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=singmos_pro_ssl"])
    assert cfg.data.batch_size == 15 and cfg.trainer.max_epochs == 200
    assert cfg.optim.lr == 1e-3 and cfg.optim.momentum == 0.9 and cfg.loss.margin == 0.1
    assert cfg.trainer.gradient_clip_val == 1.0
    assert cfg.data.corpus.sample_rate_filter == 16000
    assert cfg.model.backbone._target_ == "sqa.models.ssl.Fairseq2Wav2Vec2"


@pytest.mark.parametrize("backbone", BACKBONES)
def test_every_backbone_choice_composes(backbone):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"model/backbone={backbone}"])
    assert cfg.model.backbone._target_.startswith("sqa.models.")


@pytest.mark.parametrize(
    ("override", "node", "target"),
    [
        (
            "hparams_search=optuna",
            "sweeper",
            "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
        ),
        (
            "launcher=slurm",
            "launcher",
            "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
        ),
        ("launcher=local", "launcher", "hydra._internal.core_plugins.basic_launcher.BasicLauncher"),
    ],
)
def test_sweeper_and_launcher_configs_compose(override, node, target):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[override], return_hydra_config=True)
    assert cfg.hydra[node]._target_ == target
    if node == "sweeper":
        assert cfg.hydra.sweeper.direction == "maximize"
        assert set(cfg.hydra.sweeper.params) == {"optim.lr", "model.head_dim", "model.dropout"}


def test_compile_option_compiles_the_predictor(synthetic_root):
    overrides = [f"data.corpus.root={synthetic_root}"]
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        default = compose("train", overrides=overrides)
        compiled = compose("train", overrides=[*overrides, "compile=true"])
    assert default.compile is False
    eager_module = sqa.training.build(default)[1]
    module = sqa.training.build(compiled)[1]
    assert eager_module.predictor._compiled_call_impl is None
    assert module.predictor._compiled_call_impl is not None
    assert list(module.predictor.state_dict()) == list(eager_module.predictor.state_dict())
