"""Every experiment and every option of every config group composes and instantiates."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import lightning as L
import numpy as np
import pytest
import soundfile as sf
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from lightning.pytorch.loggers import Logger
from omegaconf import OmegaConf

import sqa.training.run
from sqa.core.resolvers import default_precision
from sqa.exports.targets import PREDICTOR_CLASSES
from sqa.models.predictor import Prediction
from sqa.training.datamodule import MOSDataModule
from tests.data.test_webmushra import write_audio as write_webmushra_audio
from tests.data.test_webmushra import write_config as write_webmushra_config
from tests.data.test_webmushra import write_results as write_webmushra_results
from tests.models.test_ssl_sources import FAIRSEQ2_TINY, FAIRSEQ_TINY, TRANSFORMERS_TINY

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
    assert isinstance(predictor, PREDICTOR_CLASSES)
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
        # Trials validate only; the sweep's end names its best value (beside the run directory claim).
        assert cfg.test_after_fit is False
        assert {name: c._target_ for name, c in cfg.hydra.callbacks.items()} == {
            "claim_run_directory": "sqa.training.run_dir.ClaimRunDirectory",
            "sweep_summary": "sqa.training.run_dir.SweepSummary",
        }
    else:
        assert cfg.test_after_fit is True


@contextmanager
def logged(listen: list[str], levels: dict[str, str]) -> Iterator[list[str]]:
    """Messages reaching the loggers `listen`, with hydra's root level INFO and these loggers' levels."""
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    loggers = {name: logging.getLogger(name) for name in ["", *levels]}
    before = {name: logger.level for name, logger in loggers.items()}
    try:
        for name, level in {"": "INFO", **levels}.items():
            loggers[name].setLevel(level)
        for name in listen:
            logging.getLogger(name).addHandler(handler)
        yield messages
    finally:
        for name in listen:
            logging.getLogger(name).removeHandler(handler)
        for name, logger in loggers.items():
            logger.setLevel(before[name])


def test_an_optuna_sweep_quiets_the_plugin_lines_and_keeps_their_warnings():
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    import optuna
    from alembic.runtime.plugins import Plugin

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["hparams_search=optuna"], return_hydra_config=True)
    quiet = {name: spec.level for name, spec in cfg.hydra.hydra_logging.loggers.items()}

    def plugin_lines(levels: dict[str, str]) -> list[str]:
        # What a sweep's start logs: alembic sets up its plugins, optuna's storage makes the study.
        with logged(["alembic", "optuna.storages"], levels) as messages:
            Plugin("sqa.test.quiet").remove()
            optuna.create_study(study_name="sqa-test")
            logging.getLogger("optuna.storages._in_memory").warning("a warning still shows")
        return messages

    # Under hydra's logging (root at INFO) both lines show, unless the sweep's levels quiet them.
    assert plugin_lines({}) == [
        "setup plugin sqa.test.quiet",
        "A new study created in memory with name: sqa-test",
        "a warning still shows",
    ]
    assert plugin_lines(quiet) == ["a warning still shows"]


def test_compile_option_compiles_the_predictor(synthetic_root):
    overrides = [f"data.corpus.root={synthetic_root}"]
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        default = compose("train", overrides=overrides)
        compiled = compose("train", overrides=[*overrides, "compile=true"])
    assert default.compile is False
    eager_module = sqa.training.run.build(default)[1]
    module = sqa.training.run.build(compiled)[1]
    assert eager_module.predictor._compiled_call_impl is None
    assert module.predictor._compiled_call_impl is not None
    assert list(module.predictor.state_dict()) == list(eager_module.predictor.state_dict())


# Every option of every config group is composed and instantiated below; experiments, the
# sweeper and the launchers are Hydra-level configs, covered by the tests above.
INSTANTIATED_GROUPS = ("data", "model", "model/backbone", "loss", "optim", "trainer", "callbacks", "logger")
# Options that need a checkpoint or a model hub are built from the tiny architectures of
# test_ssl_sources instead (no weights, no network); the large torchaudio one is built as is.
BACKBONE_OVERRIDES = {
    "fairseq2_wav2vec2_large": {"checkpoint": None, "config_overrides": FAIRSEQ2_TINY},
    "s3prl": {"upstream": None, "model_config": FAIRSEQ_TINY, "normalize": True},
    "transformers": {"path": None, "config": TRANSFORMERS_TINY, "normalize": True},
}


def group_options(group: str) -> list[str]:
    """The options of a config group: its YAML files (nested groups such as data/base are not)."""
    return sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml"))


def test_every_config_group_is_instantiated_below():
    conf = REPO / "conf"
    groups = {str(p.parent.relative_to(conf)) for p in conf.rglob("*.yaml") if p.parent != conf}
    # data/base is not a choice: the data configs include it (defaults: [base/datamodule@_here_]).
    assert groups - {"experiment", "hparams_search", "launcher", "data/base"} == set(INSTANTIATED_GROUPS)
    covered = {(g, o) for g, o, _ in GROUP_OPTIONS}
    assert {("loss", o) for o in ("margin_l1", "frame_margin_l1", "clipped_mse", "contrastive")} <= covered
    assert {("optim", "adam"), ("data", "csv"), ("data", "singmos_vmc24")} <= covered


@pytest.fixture(scope="module")
def corpora(synthetic_root, tmp_path_factory) -> dict[str, list[str]]:
    """Overrides pointing each data option at a corpus: the synthetic one, or tiny files in its layout."""
    root = tmp_path_factory.mktemp("corpora")
    rng = np.random.default_rng(0)
    (root / "wav").mkdir()
    (root / "sets").mkdir()
    rows = ["wav_path,score,system_id,sample_id,split"]
    for split, list_name in (("train", "train"), ("valid", "val"), ("test", "eval")):
        lines = []
        for system in range(3):
            for utt in range(2):
                sample_id = f"voicemos2024-track2-sys{system}-{split}{utt}"
                sf.write(root / "wav" / f"{sample_id}.wav", rng.uniform(-0.5, 0.5, 8000), 16000)
                score = 1.5 + system + 0.5 * utt
                lines.append(f"{sample_id},{score}")
                rows.append(f"wav/{sample_id}.wav,{score},sys{system},{sample_id},{split}")
        (root / "sets" / f"{list_name}_mos_list.txt").write_text("\n".join(lines) + "\n")
    (root / "manifest.csv").write_text("\n".join(rows) + "\n")
    # The MUSHRA-style corpus rates the synthetic corpus's audio, found under <root>/audio.
    (root / "mushra").mkdir()
    (root / "mushra" / "audio").symlink_to(synthetic_root)
    # A webMUSHRA folder: configs/, its audio and results/<testId>/mushra.csv.
    study = root / "webMUSHRA"
    write_webmushra_audio(study)
    study_config, study_results = write_webmushra_config(study), write_webmushra_results(study)
    return {
        "csv": [f"data.corpus.path={root / 'manifest.csv'}"],
        "singmos_pro": [f"data.corpus.root={synthetic_root}"],
        "singmos_vmc24": [f"data.corpus.root={root}"],
        "synthetic": [f"data.corpus.root={synthetic_root}"],
        "synthetic_mushra": [f"data.corpus.root={root / 'mushra'}"],
        "webmushra": [f"data.corpus.results={study_results}", f"data.corpus.config={study_config}"],
        # Generated on first use: its smallest size with a carved validation clip per system.
        "small_table": [f"data.corpus.root={root / 'small-table'}", "data.corpus.clips=30"],
        # Generated on first use, as small as the layout allows (a test clip per test system).
        "synthetic_songs": [
            f"data.corpus.root={root / 'songs'}",
            "data.corpus.clips_per_system=2",
            "+data.corpus.systems_per_batch=[3,3,3,2,2]",
        ],
    }


def compose_option(group: str, option: str, overrides: list[str] = ()):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=[f"{group}={option}", *overrides])


def check_data(cfg, option, tmp_path) -> None:
    datamodule = instantiate(cfg.data)
    assert isinstance(datamodule, MOSDataModule) and datamodule.test_names
    batch = next(iter(datamodule.train_dataloader()))
    assert batch["wav"].shape[0] == min(cfg.data.batch_size, len(datamodule.train_clips))


def check_model(cfg, option, tmp_path) -> None:
    predictor = instantiate(cfg.model)
    assert isinstance(predictor, PREDICTOR_CLASSES)
    assert predictor(torch.randn(2, 8000), torch.tensor([8000, 6000])).score.shape == (2,)


def check_backbone(cfg, option, tmp_path) -> None:
    for key, value in BACKBONE_OVERRIDES.get(option, {}).items():
        # Set on the node: `config` would clash with instantiate's own first argument.
        cfg.model.backbone[key] = value
    backbone = instantiate(cfg.model.backbone)
    frames, frame_lengths = backbone(torch.randn(2, 8000), torch.tensor([8000, 6000]))
    assert frames.shape[0] == 2 and frame_lengths[0] > frame_lengths[1] > 0


def check_loss(cfg, option, tmp_path) -> None:
    if option.endswith("_nll"):
        # A likelihood loss scores a predicted spread: it trains the uncertainty family.
        cfg = compose_option("loss", option, ["model=uncertainty"])
    predictor = instantiate(cfg.model)
    out = predictor(torch.randn(3, 8000), torch.tensor([8000, 6000, 4000]))
    value = instantiate(cfg.loss)(out, torch.tensor([1.0, 3.0, 5.0]))
    value.backward()
    assert value.ndim == 0 and torch.isfinite(value) and value > 0


def check_optim(cfg, option, tmp_path) -> None:
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = instantiate(cfg.optim)([weight])
    weight.sum().backward()
    optimizer.step()
    assert isinstance(optimizer, torch.optim.Optimizer) and (weight < 1).all()


def check_trainer(cfg, option, tmp_path) -> None:
    trainer = instantiate(cfg.trainer, logger=False, default_root_dir=str(tmp_path))
    assert trainer.max_epochs == cfg.trainer.max_epochs


def check_callbacks(cfg, option, tmp_path) -> None:
    callbacks = {name: instantiate(spec) for name, spec in cfg.callbacks.items()}
    assert callbacks and all(isinstance(c, L.Callback) for c in callbacks.values())


def check_logger(cfg, option, tmp_path) -> None:
    logger = instantiate(cfg.logger, save_dir=str(tmp_path))
    logger.log_hyperparams({"seed": 0})
    assert isinstance(logger, Logger)
    if option == "wandb":
        # A started wandb run is global to the process: finish it, or a later run's WandbLogger
        # attaches to this one and writes into this test's folder.
        logger.experiment.finish()


CHECKS = {
    "data": check_data,
    "model": check_model,
    "model/backbone": check_backbone,
    "loss": check_loss,
    "optim": check_optim,
    "trainer": check_trainer,
    "callbacks": check_callbacks,
    "logger": check_logger,
}
GROUP_OPTIONS = [(g, o, CHECKS[g]) for g in INSTANTIATED_GROUPS for o in group_options(g)]


@pytest.mark.parametrize(
    ("group", "option", "check"), GROUP_OPTIONS, ids=[f"{g}={o}" for g, o, _ in GROUP_OPTIONS]
)
def test_every_option_composes_and_instantiates(group, option, check, corpora, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = compose_option(group, option, corpora[option] if group == "data" else [])
    check(cfg, option, tmp_path)


DATA_DEFAULTS = {
    "_target_": "sqa.training.datamodule.MOSDataModule",
    "sample_rate": 16000,
    "batch_size": 15,
    "eval_batch_size": 8,
    "num_workers": 4,
    "max_train_seconds": 10.0,
    "eval_max_seconds": None,
    "preload": "auto",
    "vocal_only": False,
    "seed": "${seed}",
    "split_seed": 0,
    "train_domains": None,
    "valid_share": 0.1,
    "valid_split_csv": None,
    "test_share": 0.2,
    "test_split_csv": None,
    "split_by": "auto",
    "on_error": "raise",
    "bucketing": False,
    "max_batch_seconds": None,
}
EXPECTED_DATA = {
    "csv": {
        "corpus": {
            "_target_": "sqa.data.readers.read_csv_manifest",
            "path": "???",
            "root": None,
            "default_split": None,
            "sample_rate_filter": None,
            "score_range": [1.0, 5.0],
            "encoding": None,
            "replicates": "per_listener",
            "reference_systems": [],
            "anchor_systems": [],
            "columns": None,
            "delimiter": None,
            "rater_columns": None,
        }
    },
    "singmos_pro": {
        "corpus": {
            "_target_": "sqa.data.readers.read_singmos_pro",
            "root": "???",
            "test_batches": ["singmospro-p1", "singmospro-p2", "singmospro-p3"],
            "sample_rate_filter": 16000,
            "score_range": [1.0, 5.0],
        }
    },
    "singmos_vmc24": {
        "corpus": {
            "_target_": "sqa.data.readers.read_vmc24",
            "root": "???",
            "sample_rate_filter": None,
            "score_range": [1.0, 5.0],
        }
    },
    "synthetic": {
        "corpus": {
            "_target_": "sqa.data.synthetic.load_synthetic",
            "root": "${oc.env:SQA_DATA_DIR,data}/synthetic-seed${.seed}-clips${.clips_per_system}",
            "seed": 0,
            "clips_per_system": 14,
            "sample_rate_filter": None,
        },
        "batch_size": 8,
        "eval_batch_size": 16,
        "num_workers": 0,
        "preload": True,
    },
    "synthetic_mushra": {
        "corpus": {
            "_target_": "sqa.data.synthetic.load_synthetic_mushra",
            "root": "${oc.env:SQA_DATA_DIR,data}/synthetic-mushra-seed${.seed}-clips${.clips_per_system}",
            "seed": 0,
            "clips_per_system": 14,
            "replicates": "per_listener",
        },
        "batch_size": 8,
        "eval_batch_size": 16,
        "num_workers": 0,
        "preload": True,
    },
}


@pytest.mark.parametrize("option", sorted(EXPECTED_DATA))
def test_data_configs_compose_the_shared_base_with_their_own_values(option):
    composed = OmegaConf.to_container(compose_option("data", option).data, resolve=False)
    assert composed == {**DATA_DEFAULTS, **EXPECTED_DATA[option]}


def test_import_sqa_registers_the_precision_resolver_without_torch():
    code = (
        "import sys\nimport sqa\nassert 'torch' not in sys.modules\n"
        "from omegaconf import OmegaConf\nprint(OmegaConf.create({'p': '${sqa_precision:}'}).p)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == default_precision()
