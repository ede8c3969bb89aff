"""The top-level keys of train.yaml that a run reads itself, read in one place (`RunSettings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf


@dataclass(frozen=True)
class RunSettings:
    """The top-level keys of train.yaml that training reads itself (config groups are instantiated)."""

    seed: int
    bootstrap: int
    resume: bool
    overwrite: bool
    overwrite_export: bool
    compile: bool
    # Validation checks without improvement before stopping (0 or None: no early stopping).
    early_stopping_patience: int | None
    # {checkpoint, modules} of another run's export to start from (None: from scratch).
    init_from: dict[str, Any] | None
    # How the head's output layer starts: "train_mean" (the constant predictor) or "random".
    head_init: str = "random"
    # Test and export the selected checkpoint after fitting; false validates only (sweep trials).
    test_after_fit: bool = True

    @classmethod
    def of(cls, cfg: DictConfig) -> RunSettings:
        """The settings of `cfg`, a config composed from train.yaml (init_from and compile may be absent)."""
        init = cfg.get("init_from")
        return cls(
            seed=int(cfg.seed),
            bootstrap=int(cfg.bootstrap),
            resume=bool(cfg.resume),
            overwrite=bool(cfg.overwrite),
            overwrite_export=bool(cfg.overwrite_export),
            compile=bool(cfg.get("compile")),
            early_stopping_patience=cfg.early_stopping_patience,
            init_from=OmegaConf.to_container(init, resolve=True) if init else None,
            head_init=str(cfg.get("head_init") or "random"),
            test_after_fit=bool(cfg.get("test_after_fit", True)),
        )
