"""The training side of a run directory: its log file, and the Hydra callback that claims it.

The lock, the previous-run rule and the ownership of its files are `sqa.core.run_folder`'s.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from sqa.core.run_folder import LINK_REFUSED, LOG_NAME, RunDirError, lock, open_no_follow, prepare

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
    "export",
)


def run_inputs(cfg: DictConfig) -> list[str]:
    """The paths the run or evaluation configured by `cfg` reads (those of INPUT_KEYS that are set)."""
    found = (OmegaConf.select(cfg, key, default=None, throw_on_missing=False) for key in INPUT_KEYS)
    return [str(value) for value in found if isinstance(value, str) and value]


LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


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
        yield
    finally:
        logging.captureWarnings(False)
        for logger, h in added:
            logger.removeHandler(h)
        sqa_logger.setLevel(level)
        if own_file:
            handler.close()


def is_leader() -> bool:
    """Whether this process is the first DDP rank (the only one that owns the run directory)."""
    # Imported here: `lock` and `prepare` stay free of torch and Lightning (seconds to import).
    from lightning.pytorch.utilities import rank_zero_only

    return rank_zero_only.rank == 0


class ClaimRunDirectory(Callback):
    """Hydra callback: lock and check the run directory before Hydra writes `.hydra/` and train.log.

    Without it, a second run into a directory in use would replace the first run's `.hydra/`
    copies before `sqa.training.run.run` could refuse it. The lock is held until the run ends. A
    refused directory ends the process (exit status 1) with the message on stderr.
    """

    def __init__(self) -> None:
        self._claims: list[Any] = []

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Claim `hydra.run.dir` (first DDP rank only; other ranks share the leader's directory)."""
        if not is_leader():
            return
        HydraConfig.instance().set_config(config)
        run_dir = Path(str(config.hydra.run.dir))
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
            self.on_run_end()
            # Hydra turns a callback's exceptions into warnings and runs the job anyway; only an
            # exit stops it before it writes into the directory.
            raise SystemExit(f"Error: {err}") from None

    def on_run_end(self, **kwargs: Any) -> None:
        """Release the lock taken in `on_run_start`."""
        while self._claims:
            self._claims.pop().__exit__(None, None, None)
