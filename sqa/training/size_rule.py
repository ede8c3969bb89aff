"""Settings that follow the corpus size: the default model on a small corpus becomes the small-corpus preset.

The defaults of train.yaml are the paper's, chosen for 4,453 clips. Measured on small tables
(docs/results.md#small-tables-the-learning-curve), the log-mel model trained from scratch beat the
constant predictor in every seed only from 84 training clips on, while the frozen pretrained
Distill-MOS backbone of `experiment=small_corpus` was as good or better at every size. So a
train.py run that asked for nothing but the defaults (no model, backbone, optimiser, training
length, fine-tuning or experiment on its command line) and has fewer than
`SMALL_CORPUS_CLIPS` training clips is composed again with `experiment=small_corpus`
appended. Every other command-line setting (data, seed, ...) keeps its value, as Hydra composes it.
`size_rule=false` keeps the configuration as given.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

# On the small tables the log-mel model trained from scratch beat the constant predictor in 3 of
# 3 seeds from 84 training clips (tables of 120) and in 2 of 5 at 42 (tables of 60), where the
# frozen pretrained Distill-MOS beat it in 3 of 5 (docs/results.md#small-tables-the-learning-curve).
SMALL_CORPUS_CLIPS = 80
PRESET = "experiment=small_corpus"
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# Command-line keys (and their children) that choose the model or how it trains: a run that sets
# any of them has chosen its settings, and the rule leaves them as given.
CHOSEN = (
    "model",
    "optim",
    "experiment",
    "init_from",
    "head_init",
    "finetune",
    "trainer.max_steps",
    "trainer.max_epochs",
    "size_rule",
)


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
class SizeDecision:
    """Whether a run is composed again with PRESET, and the line that says so or why not (None: silent)."""

    overrides: tuple[str, ...] | None
    line: str | None

    def record(self) -> dict[str, object]:
        """The decision for run_info.json."""
        return {"applied": self.overrides is not None, "preset": PRESET if self.overrides else None}


def decide(
    enabled: bool,
    train_clips: int,
    from_scratch: bool,
    overrides: Sequence[str] | None,
    pretrained: bool | None = None,
) -> SizeDecision:
    """The size rule for a run of `train_clips` training clips whose model trains from scratch or not.

    `overrides` are the run's command-line overrides (None: not a train.py command line, so there
    is nothing to compose again); `pretrained` whether the distillmos package is installed (None: look).
    """
    if not enabled or not from_scratch or train_clips >= SMALL_CORPUS_CLIPS:
        return SizeDecision(None, None)
    head = f"small corpus: {train_clips} training clips (fewer than {SMALL_CORPUS_CLIPS})"
    if overrides is None:
        return SizeDecision(None, f"{head}; {PRESET} starts from a pretrained backbone (docs/selection.md)")
    picked = chosen(overrides)
    if picked:
        return SizeDecision(
            None,
            f"{head}, but {picked[0]} chooses the model or its training, so the size rule keeps the "
            f"configuration; a model trained from scratch this small often predicts no better than the "
            f"training mean, and {PRESET} starts from a pretrained backbone (docs/selection.md)",
        )
    if pretrained is None:
        pretrained = importlib.util.find_spec("distillmos") is not None
    if not pretrained:
        return SizeDecision(
            None,
            f"{head}: {PRESET} would start from the pretrained Distill-MOS backbone, but the distillmos "
            "package is not installed (pip install 'sqa[distillmos]'); training the default model from "
            "scratch, which this small often predicts no better than the training mean",
        )
    return SizeDecision(
        (*overrides, PRESET),
        f"{head}: the size rule adds {PRESET} (the frozen pretrained Distill-MOS backbone, "
        "Adam, the head started at the training mean; docs/selection.md); size_rule=false keeps the "
        "default model",
    )


def compose_train(overrides: Sequence[str]) -> DictConfig:
    """train.yaml composed with `overrides`, inside a running Hydra app or on its own."""
    if GlobalHydra.instance().is_initialized():
        return compose(config_name="train", overrides=list(overrides))
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))
