"""The training side of a run directory: its log file, the Hydra callback that claims it, and sweeps.

The lock, the previous-run rule and the ownership of its files are `sqa.core.run_folder`'s. A
folder made for a run that stopped before writing anything of its own is removed again
(`remove_unused`); `SweepSummary` says what an Optuna sweep's best value is and how to test it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from sqa.core import ownership
from sqa.core.run_folder import LOG_NAME, missing_folders, prepare, remove_unused
from sqa.core.run_lock import LINK_REFUSED, LOCK_NAME, RunDirError, lock, open_no_follow

log = logging.getLogger(__name__)


class NoFollowFileHandler(logging.FileHandler):
    """A `logging.FileHandler` appending to its file, refusing a symbolic link in its place."""

    def _open(self) -> Any:
        fd = open_no_follow(Path(self.baseFilename), os.O_WRONLY | os.O_APPEND)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


# The settings that name a file or folder a run reads: a run directory holding one is never cleared.
INPUT_KEYS = (
    "data.corpus.path",
    "data.corpus.root",
    "data.valid_split_csv",
    "data.test_split_csv",
    "init_from.checkpoint",
    "model.backbone.checkpoint",
    "model.backbone.path",
    # A fusion backbone's two parts (sqa.models.fusion).
    "model.backbone.first.checkpoint",
    "model.backbone.first.path",
    "model.backbone.second.checkpoint",
    "model.backbone.second.path",
    "export",
)


def run_inputs(cfg: DictConfig) -> list[str]:
    """The paths the run or evaluation configured by `cfg` reads (those of INPUT_KEYS that are set)."""
    found = (OmegaConf.select(cfg, key, default=None, throw_on_missing=False) for key in INPUT_KEYS)
    return [str(value) for value in found if isinstance(value, str) and value]


LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
# Lightning's info lines that say nothing about the run: hardware it did not use, and adverts.
LIGHTNING_NOISE = ("GPU available: ", "TPU available: ", "HPU available: ", "💡 Tip")
# The loggers Lightning's rank-zero messages go through (fabric's or pytorch's, by import order).
RANK_ZERO_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class LightningNoise(logging.Filter):
    """Drops Lightning's lines of `LIGHTNING_NOISE` (hardware it did not use, adverts); keeps the rest."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a noise line, so it is neither shown nor written to train.log."""
        return not str(record.msg).startswith(LIGHTNING_NOISE)


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """For the block, leave out Lightning's lines of `LIGHTNING_NOISE` (hardware it did not use, adverts)."""
    noise = LightningNoise()
    for name in RANK_ZERO_LOGGERS:
        logging.getLogger(name).addFilter(noise)
    try:
        yield
    finally:
        for name in RANK_ZERO_LOGGERS:
            logging.getLogger(name).removeFilter(noise)


@contextmanager
def log_to_file(run_dir: str | Path) -> Iterator[None]:
    """For the block, copy what the console shows (logging, Lightning, warnings) into train.log.

    Under train.py, Hydra's job logging already writes the root logger to `<run_dir>/train.log`;
    otherwise a file handler is added for the block, plus a console handler where the root logger
    has none. Lightning's loggers, which do not propagate when Lightning was imported before
    logging was configured, get the file handler too; warnings go through logging.
    """
    # The folder is resolved, not the file: a linked train.log must be refused, never followed.
    path = Path(run_dir).resolve() / LOG_NAME
    root = logging.getLogger()
    added: list[tuple[logging.Logger, logging.Handler]] = []
    handler = next(
        (
            h
            for h in root.handlers
            if isinstance(h, logging.FileHandler)
            and Path(h.baseFilename).parent.resolve() / Path(h.baseFilename).name == path
        ),
        None,
    )
    own_file = handler is None
    if handler is None:
        handler = NoFollowFileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        if not root.handlers:
            added.append((root, logging.StreamHandler()))
        added.append((root, handler))
    for name in ("lightning.pytorch", "lightning.fabric"):
        if not logging.getLogger(name).propagate:
            added.append((logging.getLogger(name), handler))
    sqa_logger = logging.getLogger("sqa")
    level = sqa_logger.level
    if sqa_logger.getEffectiveLevel() > logging.INFO:
        sqa_logger.setLevel(logging.INFO)
    for logger, h in added:
        logger.addHandler(h)
    logging.captureWarnings(True)
    try:
        with quiet_lightning():
            yield
    finally:
        logging.captureWarnings(False)
        for logger, h in added:
            logger.removeHandler(h)
        sqa_logger.setLevel(level)
        if own_file:
            handler.close()


# What a run writes before training, all of which the next run writes again (Hydra's `.hydra/`
# included): a folder made for a run that stopped holding only these, or empty folders, goes
# (`sqa.core.run_folder.remove_unused`).
UNUSED = (
    ".hydra",
    LOG_NAME,
    "config.yaml",
    "run_info.json",
    "valid_split.csv",
    "test_split.csv",
    LOCK_NAME,
    ownership.MANIFEST,
)
# The folders `ClaimRunDirectory` made for this process's run, by resolved run directory.
_made: dict[Path, list[Path]] = {}


def made_for_run(run_dir: str | Path) -> list[Path]:
    """The folders `ClaimRunDirectory` made for the run into `run_dir` ([] when it made none)."""
    return _made.get(Path(run_dir).resolve(), [])


def is_leader() -> bool:
    """Whether this process is the first DDP rank (the only one that owns the run directory)."""
    # Imported here: `lock` and `prepare` stay free of torch and Lightning (seconds to import).
    from lightning.pytorch.utilities import rank_zero_only

    return rank_zero_only.rank == 0


class ClaimRunDirectory(Callback):
    """Hydra callback: lock and check the run directory before Hydra writes `.hydra/` and train.log.

    Without it, a second run into a directory in use would replace the first run's `.hydra/`
    copies before `sqa.training.run.run` could refuse it. The lock is held until the run ends. A
    refused directory ends the process (exit status 1) with the message on stderr. The folders it
    makes are recorded for the run (`made_for_run`), which removes them again if it writes nothing.
    """

    def __init__(self) -> None:
        self._claims: list[Any] = []
        self._made: list[Path] = []

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Claim `hydra.run.dir` (first DDP rank only; other ranks share the leader's directory)."""
        if not is_leader():
            return
        HydraConfig.instance().set_config(config)
        run_dir = Path(str(config.hydra.run.dir))
        made = missing_folders(run_dir)
        if made:
            _made[run_dir.resolve()] = made
            self._made.append(run_dir.resolve())
        claim = lock(run_dir)
        try:
            claim.__enter__()
            self._claims.append(claim)
            resume, overwrite = bool(config.get("resume")), bool(config.get("overwrite"))
            prepare(run_dir, resume, overwrite, remove_log=True, inputs=run_inputs(config))
            if (run_dir / LOG_NAME).is_symlink():
                # Hydra's job logging, configured next, would append to the link's target.
                raise RunDirError(f"{run_dir / LOG_NAME}: {LINK_REFUSED}")
        except RunDirError as err:
            self._release(err)
            remove_unused(made, UNUSED)
            # Hydra turns a callback's exceptions into warnings and runs the job anyway; only an
            # exit stops it before it writes into the directory.
            raise SystemExit(f"Error: {err}") from None

    def on_run_end(self, **kwargs: Any) -> None:
        """Release the lock taken in `on_run_start`; forget the folders made for the run."""
        self._release()

    def _release(self, refusal: RunDirError | None = None) -> None:
        """Release the claims (as refused by `refusal`: their new lock files go) and the made folders."""
        while self._claims:
            claim = self._claims.pop()
            if refusal is None:
                claim.__exit__(None, None, None)
            else:
                claim.__exit__(RunDirError, refusal, refusal.__traceback__)
        while self._made:
            _made.pop(self._made.pop(), None)


class SweepSummary(Callback):
    """Hydra callback ending an Optuna sweep: what its best value is, and how to test those settings.

    The sweeper prints `Best value: -0.655` alone; this names it from the best trial's run_info.json
    (`objective`) and prints the command that trains the best trial's settings once more with
    testing and an export (its trials validate only: `test_after_fit=false`).
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Log the best value's quantity and sign, its trial, and the command to test its settings."""
        sweep_dir = Path(str(config.hydra.sweep.dir))
        results = sweep_dir / "optimization_results.yaml"
        if not results.is_file():
            return
        best = OmegaConf.to_container(OmegaConf.load(results))
        if "best_value" not in best:
            return  # several objectives: no single best trial
        trial = best_trial(sweep_dir, float(best["best_value"]))
        if trial is None:
            log.warning("No trial under %s records the best value %s", sweep_dir, best["best_value"])
            return
        # Imported here: this module stays free of Lightning (run_outputs needs it).
        from sqa.training.run_outputs import describe_objective

        record = json.loads((trial / "run_info.json").read_text(encoding="utf-8"))["objective"]
        log.info("Best value %s (trial %s: %s)", describe_objective(record), trial.name, trial)
        log.info(
            "The trials were validated only; train, test and export the best settings once with:\n  %s",
            best_command(trial, sweep_dir / "best"),
        )


def best_trial(sweep_dir: Path, value: float) -> Path | None:
    """The first trial directory of `sweep_dir` whose run_info.json records the objective `value`."""
    # In job order: the sweeper's best trial is the first of equal values.
    trials = sorted(
        sweep_dir.glob("*/run_info.json"),
        key=lambda p: (int(p.parent.name) if p.parent.name.isdigit() else math.inf, p.parent.name),
    )
    for info in trials:
        record = json.loads(info.read_text(encoding="utf-8")).get("objective")
        if record and math.isclose(record["value"], value, rel_tol=1e-12, abs_tol=0.0):
            return info.parent
    return None


def best_command(trial: Path, run_dir: Path) -> str:
    """The train.py command running `trial`'s settings once with testing, into `run_dir`."""
    overrides = OmegaConf.to_container(OmegaConf.load(trial / ".hydra" / "overrides.yaml"))
    # Without the search config, test_after_fit takes its default (true) again.
    dropped = ("hparams_search", "test_after_fit")
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in dropped]
    return shlex.join(["python", sys.argv[0], *kept, f"hydra.run.dir={run_dir}"])
