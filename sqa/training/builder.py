"""Building a run's data module and Lightning module from its composed config (`build`)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from sqa.core.prediction import OVERALL
from sqa.data.corpus import Clip, Corpus, CorpusError, count_labels
from sqa.exports.format import read_architecture, read_export_weights, read_weights
from sqa.training.datamodule import MOSDataModule
from sqa.training.lit_module import MOSModule
from sqa.training.run_settings import RunSettings
from sqa.training.selection import choose_rule

log = logging.getLogger(__name__)

HEAD_INITS = ("train_mean", "random")
# Where the model of a run with init_from comes from: cfg.model (MDF stage 2) or the export itself.
ARCHITECTURES = ("config", "export")


def read_corpus(cfg: DictConfig) -> Corpus:
    """The corpus `cfg.data.corpus` describes, read and checked (a CorpusError says what is wrong)."""
    try:
        return instantiate(cfg.data.corpus)
    except InstantiationException as err:
        # Hydra wraps the error in a one-line repr; a corpus report is multi-line text.
        if isinstance(err.__cause__, CorpusError):
            raise err.__cause__ from None
        raise


def build(cfg: DictConfig, corpus: Corpus | None = None) -> tuple[MOSDataModule, MOSModule]:
    """Instantiate the data module and the Lightning module described by `cfg`.

    `corpus` is `cfg.data.corpus` already read (the candidates of a run read it once); None reads it.
    """
    settings = RunSettings.of(cfg)
    architecture = (settings.init_from or {}).get("architecture", "config")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"init_from.architecture must be one of {list(ARCHITECTURES)}, got {architecture!r}")
    # Fine-tuning an export or import as it is: its own architecture and f0 settings, cfg.model unused.
    recorded = read_architecture(settings.init_from["checkpoint"]) if architecture == "export" else None
    model = recorded.model if recorded else cfg.model
    # f0 is extracted only when the model has a pitch branch, per-judge items only when it has a
    # judge embedding; the domain count is the corpus's, the judge count the training split's.
    f0_extractor = None
    if model.get("pitch"):
        f0_extractor = recorded.f0_extractor if recorded else instantiate(cfg.f0)
    dimensions = list(model.get("dimensions") or [OVERALL])
    # Before the data module decodes every clip: a missing weights file is found at once.
    # A fusion backbone's two parts name their own weights (sqa.models.fusion).
    paths = {
        f"model.backbone{part}.{k}": OmegaConf.select(cfg, f"model.backbone{part}.{k}")
        for part in ("", ".first", ".second")
        for k in ("checkpoint", "path")
    }
    paths["init_from.checkpoint"] = settings.init_from["checkpoint"] if settings.init_from else None
    for key, path in paths.items():
        if path and not Path(path).expanduser().exists():
            raise FileNotFoundError(f"{key}: {path} does not exist")
    corpus = read_corpus(cfg) if corpus is None else corpus
    # The corpus is handed over as it is (Hydra would turn a dataclass into a config); the rest is
    # resolved first, as the data group's interpolations (`${seed}`) point outside it.
    data = OmegaConf.create(OmegaConf.to_container(cfg.data, resolve=True))
    data.pop("corpus")
    make = instantiate(
        data,
        _partial_=True,
        f0_extractor=f0_extractor,
        dimensions=dimensions,
        judges=bool(model.get("judge_dim")),
    )
    datamodule: MOSDataModule = make(corpus=corpus)
    # The predictor learns on its internal 1-5 scale and maps its scores onto the corpus's.
    corpus_sizes = {
        "num_domains": len(datamodule.corpus.domains),
        "num_judges": datamodule.num_judges,
        "score_range": list(datamodule.corpus.score_range),
    }
    if recorded:
        predictor = recorded.build(**corpus_sizes)
        log.info("Model: the architecture of %s (init_from.architecture=export)", recorded.config_path.parent)
    else:
        predictor = instantiate(cfg.model, **corpus_sizes)
    if settings.head_init not in HEAD_INITS:
        raise ValueError(f"head_init must be one of {list(HEAD_INITS)}, got {settings.head_init!r}")
    if settings.head_init == "train_mean":
        predictor.start_at(train_means(datamodule.train_clips, predictor.dimensions))
    if settings.init_from:
        init_from(predictor, settings.init_from["checkpoint"], list(settings.init_from["modules"]))
    if settings.compile:
        predictor.compile()
    # Decided from the validation labels alone, so before training: see sqa.training.selection.
    valid_counts = {name: count_labels(clips) for name, clips in datamodule.corpus.valid_sets().items()}
    module = MOSModule(
        predictor,
        loss=instantiate(cfg.loss),
        optimizer=instantiate(cfg.optim),
        valid_names=datamodule.valid_names,
        test_names=datamodule.test_names,
        seed=settings.seed,
        bootstrap=settings.bootstrap,
        selection=choose_rule(valid_counts, **cfg.selection),
        # patience_steps is the fit's stop rule (sqa.training.racing), not the module's.
        **{k: v for k, v in cfg.finetune.items() if k != "patience_steps"},
    )
    return datamodule, module


def train_means(clips: list[Clip], dimensions: list[str]) -> list[float]:
    """The mean training label of each score dimension (over the clips that have one)."""
    means = []
    for dim in dimensions:
        values = [
            c.mos if dim == OVERALL else c.extra_scores[dim]
            for c in clips
            if dim == OVERALL or dim in c.extra_scores
        ]
        means.append(sum(values) / len(values))
    return means


def init_from(predictor: torch.nn.Module, checkpoint: str | Path, modules: list[str]) -> None:
    """Copy the weights of the named top-level submodules from an export (or its model.pt).

    Used for multi-dataset finetuning: stage 2 starts from stage 1's backbone and head. The
    weights get the checks of loading an export (`sqa.exports.weights.read_weights`): an export's
    against its config.yaml's architecture, a model.pt without one against this predictor's, so
    that the archive's declared size is bounded before it is read and a weight that is not a
    float, or not finite once cast to the dtype it is trained in, is refused. A named module that
    the checkpoint does not hold, or whose shapes differ, is an error.
    """
    path = Path(checkpoint)
    path = path / "model.pt" if path.is_dir() and (path / "model.pt").exists() else path
    own = predictor.state_dict()
    if path.is_file() and (path.parent / "config.yaml").exists():
        state = read_export_weights(path)
    elif path.is_file():
        state = read_weights(path, own)
    elif path.is_dir():
        state = read_export_weights(path)  # a run directory holding export/
    else:
        raise FileNotFoundError(f"init_from: {path} not found (give an export directory or its model.pt)")
    for module in modules:
        keys = [k for k in own if k.startswith(f"{module}.")]
        if not keys or not all(k in state for k in keys):
            raise ValueError(f"init_from: {path} has no complete weights for module {module!r}")
        for key in keys:
            if state[key].shape != own[key].shape:
                raise ValueError(
                    f"init_from: {key} has shape {tuple(state[key].shape)} in {path}, "
                    f"{tuple(own[key].shape)} in this model"
                )
            own[key] = state[key]
    predictor.load_state_dict(own)
