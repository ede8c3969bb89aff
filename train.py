"""Hydra entry point: build -> fit -> test every test set -> export the best checkpoint.

python train.py                               # log-mel model on the built-in synthetic corpus
python train.py model/backbone=tiny_wav2vec2  # same run with a tiny wav2vec2
python train.py experiment=singmos_pro_ssl data.corpus.root=... model.backbone.checkpoint=...
python train.py -m hparams_search=optuna      # a sweep: trials validate only (test_after_fit=false)
"""

from __future__ import annotations

import sys
from pathlib import Path

from sqa.core.openmp import short_spin

# Before torch loads: OpenMP reads its settings once.
short_spin()

from sqa.core.extras import exit_without  # noqa: E402

# Without the `train` extra: one line naming it, not a traceback.
exit_without("train.py", ("hydra", "omegaconf", "lightning"))

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sqa.core.run_lock import RunDirError
from sqa.core.signals import stop_on_signals
from sqa.data.corpus import CorpusError
from sqa.exports.config import ExportError
from sqa.training.plan import CONF_DIR, compose_train
from sqa.training.run import NoCheckpointError, run
from sqa.training.typos import command_overrides, refusal


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float:
    """Train one configuration; returns the objective of sweeps (the best selection score, errors negated)."""
    hydra_cfg = HydraConfig.get()
    run_dir = hydra_cfg.runtime.output_dir
    try:
        with stop_on_signals("train.py", lambda: next_step(run_dir)):
            return run(cfg, run_dir, list(hydra_cfg.overrides.task)).objective
    except (CorpusError, RunDirError, ExportError, NoCheckpointError) as err:
        # The report is the message: print it as text on stderr, not inside a traceback.
        sys.exit("\n".join(["Error: " + str(err), *getattr(err, "__notes__", [])]))
    except OSError as err:
        if err.errno is None:  # sqa's own message (a missing file it names)
            sys.exit(f"Error: {err}")
        # The system's: a full disk, a file size limit, a folder turned read-only. Checkpoints
        # are written atomically, so the last one written is whole.
        where = f"{err.filename}: " if err.filename else ""
        sys.exit(
            f"Error: {where}{err.strerror}; what the run wrote before is kept, and resume=true "
            "continues from its last checkpoint once this is fixed"
        )


def next_step(run_dir: str) -> str:
    """What a stopped run's folder allows: resuming from a checkpoint it wrote, or running again."""
    if any(Path(run_dir).glob("**/checkpoints/last.ckpt")):
        return f"{run_dir} keeps what it wrote: the same command with resume=true continues from there"
    return "no checkpoint was written yet: run the same command again"


def refuse_typos(argv: list[str]) -> None:
    """End with status 2 and one line where the command line `argv` names a setting that does not exist."""
    overrides = command_overrides(argv)
    reason = None if overrides is None else refusal(overrides, compose_train, CONF_DIR)
    if reason is not None:
        # Before Hydra composes the configuration: its own error advises a `+` that fails later.
        print(f"train.py: {reason}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    refuse_typos(sys.argv[1:])
    main()
