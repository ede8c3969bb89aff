"""The paper protocol: evaluation clips cut to their start, the composed experiment, MDF stage 2."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from sqa.data.audio import load_audio
from sqa.data.synthetic import load_synthetic
from sqa.training.datamodule import MOSDataModule
from tests.conftest import REPO


def eval_items(datamodule: MOSDataModule) -> list[dict]:
    loaders = datamodule.val_dataloader() + datamodule.test_dataloader()
    return [item for loader in loaders for item in loader.dataset]


def test_eval_max_seconds_keeps_the_start_of_validation_and_test_clips(synthetic_root):
    corpus = load_synthetic(synthetic_root)
    whole = MOSDataModule(corpus, max_train_seconds=None)
    cut = MOSDataModule(corpus, max_train_seconds=None, eval_max_seconds=0.5)
    limit = 8000
    longer = 0
    for full, short in zip(eval_items(whole), eval_items(cut), strict=True):
        assert full["sample_id"] == short["sample_id"]
        wav = load_audio(next(c.path for c in corpus.clips if c.sample_id == full["sample_id"]), 16000)
        # Whole clips by default; with eval_max_seconds the first 0.5 s, never another window.
        np.testing.assert_array_equal(full["wav"].numpy(), wav)
        np.testing.assert_array_equal(short["wav"].numpy(), wav[:limit])
        longer += wav.shape[0] > limit
    assert longer > 0  # the corpus has clips the cut shortens
    # Training clips are not affected by the evaluation cut.
    train = cut.train_dataloader().dataset
    assert train.max_samples is None and not train.crop_from_start


def test_paper_protocol_sets_the_authors_choices():
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=paper_protocol"])
    assert cfg.data.eval_max_seconds == 10.0 and cfg.selection.metric == "train_loss"
    assert cfg.data.corpus.sample_rate_filter == 16000 and cfg.data.batch_size == 15
    assert cfg.optim._target_ == "torch.optim.SGD" and cfg.optim.lr == 1e-3 and cfg.optim.momentum == 0.9
    assert cfg.trainer.max_epochs == 200 and cfg.trainer.gradient_clip_val == 1.0
    assert cfg.loss.margin == 0.1
    # The input contract comes from the checkpoint, not from the experiment.
    assert cfg.model.backbone.normalize is None
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        default = compose("train")
    assert default.data.eval_max_seconds is None


def load_stage_modules():
    spec = importlib.util.spec_from_file_location(
        "stage_modules", REPO / "recipes/singmos_pro/stage_modules.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.stage_modules


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ({"domain_dim": None, "pitch": None}, ["backbone", "head"]),
        ({"domain_dim": 4, "pitch": None}, ["backbone", "head", "domain"]),
        ({"domain_dim": None, "pitch": "midi"}, ["backbone", "head", "pitch"]),
        (
            {"domain_dim": 4, "pitch": "histogram", "num_judges": 3, "judge_dim": 16},
            ["backbone", "head", "domain", "pitch", "judge"],
        ),
    ],
)
def test_mdf_stage2_carries_over_every_stage1_branch(tmp_path, model, expected):
    from sqa.exports.format import export_predictor
    from sqa.models.backbone import LogMelBackbone
    from sqa.models.predictor import MOSPredictor

    # The stage-1 export as sqa writes it, of a predictor with these branches.
    stage1 = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), num_domains=2, pitch_dim=8, **model)
    export = export_predictor(stage1, tmp_path / "stage1", 16000, ["a", "b"])
    assert load_stage_modules()(export) == expected
    assert set(expected) <= {name for name, _ in stage1.named_children()}


def test_mdf_stage2_modules_exist_in_the_predictor(tmp_path):
    # The names are the predictor's own submodules, so init_from finds their weights.
    import torch

    from sqa.exports.format import export_predictor
    from sqa.models.backbone import LogMelBackbone
    from sqa.models.predictor import MOSPredictor
    from sqa.training.run import init_from

    torch.manual_seed(0)
    stage1 = MOSPredictor(LogMelBackbone(channels=16), num_domains=2, domain_dim=4, pitch="midi", pitch_dim=8)
    export = export_predictor(stage1, tmp_path / "stage1", 16000, ["a", "b"])
    stage2 = MOSPredictor(LogMelBackbone(channels=16), num_domains=2, domain_dim=4, pitch="midi", pitch_dim=8)
    init_from(stage2, export, load_stage_modules()(export))
    for name, value in stage1.state_dict().items():
        assert torch.equal(stage2.state_dict()[name], value), name
    with pytest.raises(FileNotFoundError, match="stage-1 export"):
        load_stage_modules()(tmp_path)
