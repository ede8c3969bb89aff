"""Step 1 of a run: every model of its plan built on one reading of the corpus, its files written.

Each model gets its configuration, data module (the corpus carved into its splits, the same for
all: the carving is seeded by `data.split_seed`) and Lightning module before any of them trains,
so a configuration error in the last candidate stops the run before the first one spends minutes.
"""

from __future__ import annotations

import logging
import textwrap
import time
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from sqa.core import signals
from sqa.core.atomic import atomic_write_json, atomic_write_text
from sqa.core.run_folder import missing_folders, record_point, remove_unused, restore_previous
from sqa.data.corpus import Corpus, format_counts
from sqa.data.valid_split import write_valid_split
from sqa.data.validate import CorpusProblems, format_report
from sqa.training.builder import build, read_corpus
from sqa.training.datamodule import MOSDataModule
from sqa.training.plan import FOLDER, Candidate, Plan, candidate_config, needs_missing_package
from sqa.training.run_outputs import run_info
from sqa.training.run_settings import RunSettings

log = logging.getLogger(__name__)


class Prepared(NamedTuple):
    """One model of a run before training: its configuration, data, module, run_info record and folder.

    `candidate` is None for the configuration alone, trained in the run directory itself;
    `seconds` what preparing it took.
    """

    cfg: DictConfig
    settings: RunSettings
    datamodule: MOSDataModule
    module: Any
    info: dict[str, Any]
    folder: Path
    candidate: Candidate | None = None
    seconds: float = 0.0

    @property
    def name(self) -> str | None:
        """The candidate's name (None: the configuration alone)."""
        return None if self.candidate is None else self.candidate.name


def prepare(cfg: DictConfig, run_dir: Path, plan: Plan) -> tuple[list[Prepared], dict[str, str]]:
    """Every model of `plan`, prepared on one reading of the corpus; the candidates skipped, with why."""
    signals.stage("reading and checking the corpus")
    if not plan.candidates:
        return [prepare_model(cfg, run_dir)], {}
    prepared: list[Prepared] = []
    skipped: dict[str, str] = {}
    corpus = read_corpus(cfg)
    shared = OmegaConf.to_container(cfg.data.corpus, resolve=True)
    for candidate in plan.candidates:
        folder = run_dir / FOLDER / candidate.name
        own = candidate_config(plan, candidate, folder, bool(cfg.get("resume")))
        missing = needs_missing_package(own)
        if missing:
            skipped[candidate.name] = missing
            log.warning("candidate %s skipped: %s", candidate.name, missing)
            continue
        same = OmegaConf.to_container(own.data.corpus, resolve=True) == shared
        made = missing_folders(folder)
        start = time.perf_counter()
        try:
            # The corpus's problems are the run's: reported in the run directory, not the candidate's.
            model = prepare_model(own, folder, run_dir, corpus if same else None, quiet=bool(prepared))
        except BaseException:
            # A candidate stopped before training leaves no folder of its own: only the config.yaml
            # it had just written there, in folders made for it.
            remove_unused(made, ("config.yaml",))
            raise
        prepared.append(model._replace(candidate=candidate, seconds=time.perf_counter() - start))
    if not prepared:
        raise ValueError(
            f"no candidate could be trained: {'; '.join(f'{k}: {v}' for k, v in skipped.items())}"
        )
    return prepared, skipped


def prepare_model(
    cfg: DictConfig,
    folder: Path,
    report_dir: Path | None = None,
    corpus: Corpus | None = None,
    quiet: bool = False,
) -> Prepared:
    """Seed, build the data and model of `cfg` and write config.yaml, run_info.json and the splits.

    `corpus` is the corpus already read (None: read here). A corpus with problems is a
    `CorpusProblems` whose report is also written to `report_dir` (None: `folder`), as is the
    report of the clips skipped with data.on_error=skip. `quiet` leaves out the corpus table
    (a candidate after the first: the same clips and splits).
    """
    report_dir = report_dir or folder
    settings = RunSettings.of(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    # Lightning's own "Seed set to" line left out: the run says its seed once.
    L.seed_everything(settings.seed, workers=True, verbose=False)
    # Under DDP every rank runs this function; rank_zero_only.rank (from the launcher's
    # environment) lets only the first write the run's files.
    leader = rank_zero_only.rank == 0
    if leader:
        atomic_write_text(folder / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        # Recorded at once (with Hydra's files): a run killed while it builds is still sqa's to resume.
        record_point(folder)
    try:
        datamodule, module = build(cfg, corpus)
    except CorpusProblems as err:
        if leader:
            # The previous run set aside by overwrite=true comes back first, whole: its own
            # report, if it had one, is kept rather than replaced by this one.
            restored = restore_previous(report_dir)
            report = report_dir / "data_problems.txt"
            try:
                atomic_write_text(report, format_report(err.problems) + "\n", exclusive=restored)
                err.add_note(f"(this report is also in {report})")
            except FileExistsError:
                err.add_note(f"({report} is the previous run's report, kept)")
        raise
    info = _write_records(cfg, folder, report_dir, datamodule, module, quiet) if leader else {}
    return Prepared(cfg, settings, datamodule, module, info, folder)


def _write_records(
    cfg: DictConfig, folder: Path, report_dir: Path, datamodule: MOSDataModule, module: Any, quiet: bool
) -> dict[str, Any]:
    """Say the corpus and the selection rule; write run_info.json, the carved splits and the skipped clips."""
    rule = module.selection
    info = run_info(cfg, datamodule)
    counts = datamodule.label_counts()
    if not quiet:
        log.info("Corpus:\n%s", format_counts(counts))
        if rule.warning:
            # Indented lines of at most 100 characters: the warning names every set and its counts.
            wrapped = textwrap.fill(rule.warning, 100, subsequent_indent="  ", break_on_hyphens=False)
            log.warning("selection: %s", wrapped)
        log.info("Selecting checkpoints on %s", rule.describe())
    info["splits"] = {name: vars(c) for name, c in counts.items()}
    info["selection"] = rule.record()
    if datamodule.carved_valid:
        write_valid_split(datamodule.carved_valid, folder / "valid_split.csv")
        # Relative to the run directory (and the export, which holds a copy).
        info["valid_split_csv"] = "valid_split.csv"
    if datamodule.carved_test:
        write_valid_split(datamodule.carved_test, folder / "test_split.csv")
        info["test_split_csv"] = "test_split.csv"
    atomic_write_json(folder / "run_info.json", info)
    if datamodule.problems:
        atomic_write_text(report_dir / "data_problems.txt", format_report(datamodule.problems) + "\n")
    record_point(folder)
    return info
