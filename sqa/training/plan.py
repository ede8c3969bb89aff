"""The plan of a run: the models it trains, each with its configuration and folder.

A default train.py run trains several candidate models on the same splits and keeps the one
validation prefers (docs/selection.md#candidates): which kind of predictor is good depends on the
corpus, by wide margins (docs/results.md#real-listening-tests). A run whose command line chose no
model, optimiser, training length, fine-tuning or experiment (`chosen`) trains each configured
candidate in `<run dir>/candidates/<name>/`; any other run is a plan of one, the configuration as
given, trained in the run directory itself. The list order is the order of simplicity.

    candidates:
      use: [logmel, distillmos]
      models: {logmel: [], logmel_pitch: [model.pitch=intonation], distillmos: [experiment=small_corpus]}
      ensemble: false
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from sqa.core.renames import rename_targets

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# The folder, inside the run directory, that holds one folder per candidate.
FOLDER = "candidates"
# Command-line keys (and their children) that choose the model or how it trains: a run that sets
# any of them has chosen its model, and trains it alone.
CHOSEN = (
    "model",
    "optim",
    "experiment",
    "init_from",
    "head_init",
    "finetune",
    "trainer.max_steps",
    "trainer.max_epochs",
)
# The package each f0 method needs (all in the `pitch` extra).
F0_PACKAGES = {"dio": "pyworld", "fcpe": "torchfcpe", "crepe": "torchcrepe"}


def override_key(override: str) -> str:
    """The dotted key an override sets: `+optim.lr=1` -> optim.lr, `model/backbone=x` -> model.backbone."""
    return override.split("=", 1)[0].lstrip("+~").replace("/", ".")


def chosen(overrides: Sequence[str]) -> list[str]:
    """The overrides among `overrides` that choose the model or its training (keys under CHOSEN)."""
    return [
        o
        for o in overrides
        if any(override_key(o) == k or override_key(o).startswith(k + ".") for k in CHOSEN)
    ]


@dataclass(frozen=True)
class Candidate:
    """One model to try: its name and the overrides that make it from the run's configuration."""

    name: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """The candidates a run trains (none: the configuration alone), its overrides and why, in a line."""

    candidates: tuple[Candidate, ...]
    overrides: tuple[str, ...]
    ensemble: bool
    line: str | None
    # The candidate every model is judged against as the pretrained peer (None: none of them).
    peer: str | None = None
    # Folds of the cross-validation that judges the candidates where validation is too small to
    # (sqa.training.crossval; under 2: never).
    folds: int = 0


def _alone(line: str | None = None) -> Plan:
    """The plan of one: the configuration as given."""
    return Plan((), (), False, line)


def plan(cfg: DictConfig, overrides: Sequence[str] | None) -> Plan:
    """The candidates of `cfg` for a run with command-line `overrides` (None: not a train.py command line)."""
    node = cfg.get("candidates") or {}
    use = node.get("use") or []
    if not use or overrides is None:
        return _alone()
    picked = chosen(overrides)
    if picked:
        return _alone(
            f"candidates: {picked[0]} chooses the model or its training, so this run trains that "
            "configuration alone (docs/selection.md#candidates)"
        )
    if not cfg.get("test_after_fit", True):
        return _alone("candidates: test_after_fit=false (a sweep's trial) trains the configuration alone")
    devices, nodes = cfg.trainer.get("devices"), cfg.trainer.get("num_nodes", 1)
    if (isinstance(devices, int) and devices > 1) or (isinstance(nodes, int) and nodes > 1):
        return _alone("candidates: a run on several devices trains the configuration alone")
    models = node.get("models") or {}
    if isinstance(use, str) or not isinstance(use, Sequence):
        raise ValueError(f"candidates.use must be a list of names of candidates.models, got {use!r}")
    listed = []
    for name in use:
        if name not in models:
            raise ValueError(
                f"candidates.use names {name!r}, which candidates.models does not define: {list(models)}"
            )
        extra = models[name]
        if (
            not isinstance(extra, Sequence)
            or isinstance(extra, str)
            or not all(isinstance(o, str) for o in extra)
        ):
            raise ValueError(f"candidates.models.{name} must be a list of overrides, got {extra!r}")
        if not str(name).replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"candidates.models: {name!r} is not a name (letters, digits, - and _)")
        listed.append(Candidate(str(name), tuple(str(o) for o in extra)))
    if len({c.name for c in listed}) < len(listed):
        raise ValueError(f"candidates.use names a candidate twice: {list(use)}")
    names = ", ".join(c.name for c in listed)
    peer = node.get("peer")
    if peer is not None and not isinstance(peer, str):
        raise ValueError(f"candidates.peer must be the name of a candidate or null, got {peer!r}")
    folds = node.get("folds") or 0
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 0:
        raise ValueError(f"candidates.folds must be a number of folds (0: none), got {folds!r}")
    return Plan(
        tuple(listed),
        tuple(overrides),
        bool(node.get("ensemble")) and len(listed) > 1,
        f"candidates: {names} on the same splits; the best on validation is tested and exported "
        "(candidates=null trains the configuration alone)",
        # A peer the list leaves out judges nothing.
        peer if peer in {c.name for c in listed} else None,
        folds,
    )


def compose_train(overrides: Sequence[str]) -> DictConfig:
    """train.yaml composed with `overrides`, inside a running Hydra app or on its own."""
    if GlobalHydra.instance().is_initialized():
        return compose(config_name="train", overrides=list(overrides))
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def candidate_config(plan_: Plan, candidate: Candidate, folder: Path, resume: bool) -> DictConfig:
    """`candidate`'s configuration: the run's overrides, then its own; resumed where it has a checkpoint."""
    own_resume = resume and (folder / "checkpoints" / "last.ckpt").is_file()
    cfg = compose_train(
        [*plan_.overrides, *candidate.overrides, "candidates=null", f"resume={str(own_resume).lower()}"]
    )
    rename_targets(cfg)
    return cfg


def needs_missing_package(cfg: DictConfig) -> str | None:
    """What a candidate needs that is not installed (the distillmos package, an f0 extractor), or None."""
    backbone = OmegaConf.select(cfg, "model.backbone._target_") or ""
    parts = [OmegaConf.select(cfg, f"model.backbone.{p}._target_") or "" for p in ("first", "second")]
    if (
        any("distillmos" in str(t) for t in (backbone, *parts))
        and importlib.util.find_spec("distillmos") is None
    ):
        return "the distillmos package is not installed (pip install 'sqa[distillmos]')"
    method = str(OmegaConf.select(cfg, "f0.method") or "")
    package = F0_PACKAGES.get(method)
    if OmegaConf.select(cfg, "model.pitch") and package and importlib.util.find_spec(package) is None:
        return (
            f"its pitch branch needs {package} (f0.method={method}), not installed (pip install 'sqa[pitch]')"
        )
    return None
