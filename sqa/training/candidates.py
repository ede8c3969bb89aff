"""Candidates: a default run trains several models on the same splits and keeps the one validation prefers.

Which kind of predictor is good depends on the corpus, by wide margins (docs/results.md#real-listening-tests):
a pretrained speech-quality network hears separation and codec artefacts, log-mel with pitch features
hears a singer's performance. So a train.py run whose command line chose no model, optimiser,
training length, fine-tuning or experiment (`chosen`) trains each configured candidate in
`<run dir>/candidates/<name>/`, scores each selected checkpoint on the validation clips (with a
bootstrap interval), selects by the run's own validation rule and tests and exports the winner
as the run's result. The list order is the order of simplicity: a candidate replaces the best so
far only when it is better by more than `selection.tie_tolerance`. With `ensemble` on, the mean
of the two best candidates is a candidate too, after every single one.

    candidates:
      use: [logmel, distillmos]
      models: {logmel: [], logmel_pitch: [model.pitch=intonation], distillmos: [experiment=small_corpus]}
      ensemble: false

`candidates=null` trains the configuration as given. Every candidate's validation score, test
metrics and wall seconds go to run_info.json (`candidates`) and the export's model card.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from sqa.core.atomic import atomic_write_json, atomic_write_text
from sqa.core.renames import rename_targets
from sqa.core.run_folder import missing_folders, remove_unused
from sqa.exports.format import export_predictor
from sqa.metrics import CI_KEY
from sqa.models.ensemble import EnsemblePredictor
from sqa.reports import learning
from sqa.training.data_record import recorded_data
from sqa.training.evaluation import tested
from sqa.training.frame_cache import FrameStore
from sqa.training.run_dir import run_inputs
from sqa.training.run_outputs import constant_check, run_sigma, scale_shift, write_test_outputs
from sqa.training.selection import LOSS_SCORES, SelectionRule, selection_score

log = logging.getLogger(__name__)

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# The folder, inside the run directory, that holds one folder per candidate.
FOLDER = "candidates"
# The name of the mean of the two best candidates: ensemble(<first>, <second>).
ENSEMBLE = "ensemble"
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
# Candidates compare on this where the run selects checkpoints on a loss (not comparable across
# models): the validation clips' utterance-level RMSE.
LOSS_FALLBACK = ("rmse", "utt")


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


def plan(cfg: DictConfig, overrides: Sequence[str] | None) -> Plan:
    """The candidates of `cfg` for a run with command-line `overrides` (None: not a train.py command line)."""
    node = cfg.get("candidates") or {}
    use = node.get("use") or []
    if not use or overrides is None:
        return Plan((), (), False, None)
    picked = chosen(overrides)
    if picked:
        return Plan(
            (),
            (),
            False,
            f"candidates: {picked[0]} chooses the model or its training, so this run trains that "
            "configuration alone (docs/selection.md#candidates)",
        )
    if not cfg.get("test_after_fit", True):
        return Plan(
            (), (), False, "candidates: test_after_fit=false (a sweep's trial) trains the configuration alone"
        )
    devices, nodes = cfg.trainer.get("devices"), cfg.trainer.get("num_nodes", 1)
    if (isinstance(devices, int) and devices > 1) or (isinstance(nodes, int) and nodes > 1):
        return Plan((), (), False, "candidates: a run on several devices trains the configuration alone")
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
    return Plan(
        tuple(listed),
        tuple(overrides),
        bool(node.get("ensemble")) and len(listed) > 1,
        f"candidates: {names} on the same splits; the best on validation is tested and exported "
        "(candidates=null trains the configuration alone)",
    )


def compose_train(overrides: Sequence[str]) -> DictConfig:
    """train.yaml composed with `overrides`, inside a running Hydra app or on its own."""
    if GlobalHydra.instance().is_initialized():
        return compose(config_name="train", overrides=list(overrides))
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


# The package each f0 method needs (all in the `pitch` extra).
F0_PACKAGES = {"dio": "pyworld", "fcpe": "torchfcpe", "crepe": "torchcrepe"}


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


@dataclass
class Tried:
    """A candidate after training: its runs, test outcome and validation score with its interval.

    `fitted` is the fitted run, or for the ensemble its tested module; `valid` the validation results.
    """

    candidate: Candidate
    prepared: Any
    fitted: Any
    outcome: Any
    value: float
    interval: list[float] | None
    clips: int
    valid: dict[str, Any]
    # Wall seconds it took in this process: prepared, trained, tested, exported and validated (a
    # resumed candidate: what it did after resuming; the ensemble: its scoring).
    seconds: float
    # The folder of its run (the ensemble: that of the member whose data it was tested on).
    folder: Path
    # The ensemble's members, by name, in its order (a single candidate: none).
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class Phases:
    """The run's phases, as `sqa.training.run` defines them: prepare, fit, test and finish."""

    prepare: Callable[..., Any]
    fit: Callable[..., Any]
    test: Callable[..., Any]
    finish: Callable[..., Any]
    # RunResult(test, val_selection, mode): what a run returns.
    result: Callable[..., Any]


def comparison(rule: SelectionRule) -> tuple[str, str, str]:
    """The metric, level and mode candidates are compared on under `rule` (a loss rule: utterance RMSE)."""
    if rule.metric in LOSS_SCORES:
        metric, level = LOSS_FALLBACK
        return metric, level, "min"
    return rule.metric, str(rule.level), rule.mode


def validation_score(results: dict[str, Any], metric: str, level: str) -> tuple[float, list[float] | None]:
    """`metric` at `level` over the validation sets of `results` (weighted), and its interval if any."""
    sets = {name: block for name, block in results.items() if name != "avg"}
    value = selection_score(sets, metric, level)
    block = results.get("avg") if len(sets) > 1 else next(iter(sets.values()), None)
    ci = ((block or {}).get(CI_KEY) or {}).get(level, {}).get(metric)
    return value, (list(ci) if ci else None)


def validated(
    predictor: Any, prepared: Any, metric: str, level: str
) -> tuple[float, list[float] | None, Any]:
    """`predictor` scored on the prepared run's validation clips: its score, interval and tested module."""
    module = _tested(predictor, prepared, prepared.datamodule.corpus.valid_as_test())
    value, interval = validation_score(module.test_results, metric, level)
    return value, interval, module


def _tested(predictor: Any, prepared: Any, corpus: Any) -> Any:
    """`predictor` run over the test sets of `corpus` with the prepared run's rate, batch and bootstrap."""
    datamodule, settings = prepared.datamodule, prepared.settings
    config = {
        "sample_rate": datamodule.sample_rate,
        "domains": list(datamodule.corpus.domains),
        "vocal_only": datamodule.vocal_only,
    }
    return tested(
        predictor,
        corpus,
        config,
        datamodule.f0_extractor,
        datamodule.eval_batch_size,
        settings.seed,
        settings.bootstrap,
        frame_store=prepared.module.frame_store,
    )


def ensemble_of_best(
    tried: Sequence[Tried], metric: str, level: str, mode: str, result: Callable
) -> Tried | None:
    """The mean of the two best of `tried` (on validation) as a candidate, tested; None if they cannot join.

    Its validation and test clips are those of the member with a pitch extractor, if one has.
    """
    ranked = sorted(
        (t for t in tried if math.isfinite(t.value)), key=lambda t: t.value, reverse=mode == "max"
    )[:2]
    if len(ranked) < 2:
        return None
    predictors = [t.prepared.module.predictor for t in ranked]
    dims = len(predictors[0].dimensions)
    try:
        ensemble = EnsemblePredictor(predictors, [[0.5, 0.5]] * dims, [0.0] * dims).eval()
    except ValueError as err:
        log.info(
            "candidates: no ensemble of %s and %s (%s)",
            ranked[0].candidate.name,
            ranked[1].candidate.name,
            err,
        )
        return None
    log.info(
        "candidates: the mean of %s and %s is scored on the validation and test clips",
        ranked[0].candidate.name,
        ranked[1].candidate.name,
    )
    # The member with pitch features brings its f0 extractor; the ensemble's f0 is the same one.
    host = next((t for t in ranked if t.prepared.datamodule.f0_extractor is not None), ranked[0])
    start = time.perf_counter()
    value, interval, valid = validated(ensemble, host.prepared, metric, level)
    module = _tested(ensemble, host.prepared, host.prepared.datamodule.corpus)
    name = f"{ENSEMBLE}({ranked[0].candidate.name}, {ranked[1].candidate.name})"
    return Tried(
        Candidate(name, ()),
        host.prepared,
        module,
        result(module.test_results, value, mode),
        value,
        interval,
        len(valid.test_predictions),
        valid.test_results,
        time.perf_counter() - start,
        host.folder,
        tuple(t.candidate.name for t in ranked),
    )


def pick(tried: Sequence[Tried], mode: str, tolerance: float) -> Tried:
    """The best of `tried` in list order: a later one wins only when better by more than `tolerance`.

    A NaN score never wins; if every score is NaN the first candidate stays.
    """
    best = tried[0]
    for entry in tried[1:]:
        if math.isnan(entry.value):
            continue
        if math.isnan(best.value) or (
            abs(entry.value - best.value) > tolerance
            and (entry.value > best.value if mode == "max" else entry.value < best.value)
        ):
            best = entry
    return best


def _test_summary(test: dict[str, Any]) -> dict[str, Any]:
    """The test average's utterance- and system-level RMSE and SRCC of a candidate (null where undefined)."""
    avg = test.get("avg") or {}

    def value(level: str, name: str) -> float | None:
        v = (avg.get(level) or {}).get(name)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    return {level: {name: value(level, name) for name in ("rmse", "srcc")} for level in ("utt", "sys")}


def record(
    tried: Sequence[Tried], winner: Tried, skipped: dict[str, str], metric: str, level: str, mode: str
) -> dict[str, Any]:
    """The candidates' record for run_info.json and the model card."""
    return {
        "compared_on": f"validation {level} {metric} ({mode})",
        "metric": metric,
        "level": level,
        "mode": mode,
        "winner": winner.candidate.name,
        "entries": [
            {
                "name": t.candidate.name,
                "overrides": list(t.candidate.overrides),
                "folder": None if t.candidate.name.startswith(ENSEMBLE) else f"{FOLDER}/{t.candidate.name}",
                "valid": {
                    "value": t.value if math.isfinite(t.value) else None,
                    "ci": t.interval,
                    "clips": t.clips,
                },
                "test": _test_summary(t.outcome.test),
                "seconds": round(t.seconds, 1),
            }
            for t in tried
        ],
        "skipped": dict(skipped),
    }


def describe(rec: dict[str, Any]) -> str:
    """One line: which candidate won, on what, by how much, against each other."""
    entries = {e["name"]: e for e in rec["entries"]}
    win = entries[rec["winner"]]

    def shown(entry: dict[str, Any]) -> str:
        value, ci = entry["valid"]["value"], entry["valid"]["ci"]
        text = "n/a" if value is None else f"{value:.4g}"
        return text + (f" [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "")

    others = [e for name, e in entries.items() if name != rec["winner"]]
    parts = []
    for other in others:
        margin = (
            abs(win["valid"]["value"] - other["valid"]["value"])
            if win["valid"]["value"] is not None and other["valid"]["value"] is not None
            else None
        )
        by = f", by {margin:.4g}" if margin is not None else ""
        parts.append(f"{other['name']} {shown(other)}{by}")
    against = f" against {'; '.join(parts)}" if parts else ""
    return f"candidates: {rec['winner']} won on {rec['compared_on']}: {shown(win)}{against}"


def fit_select_export(plan_: Plan, cfg: DictConfig, run_dir: Path, phases: Phases) -> Any:
    """Train every candidate of `plan_` in its own folder, select on validation, finish the winner.

    Returns the winner's test outcome (`RunResult`).
    """
    resume = bool(cfg.get("resume"))
    tried: list[Tried] = []
    skipped: dict[str, str] = {}
    metric = level = mode = ""
    tolerance = float((cfg.get("selection") or {}).get("tie_tolerance", 1e-6))
    # Candidates over the same frozen network (distillmos_ft while frozen, calibrated) share its
    # frames of each clip.
    store = FrameStore()
    for number, candidate in enumerate(plan_.candidates, start=1):
        folder = run_dir / FOLDER / candidate.name
        own_resume = resume and (folder / "checkpoints" / "last.ckpt").is_file()
        cand_cfg = compose_train(
            [*plan_.overrides, *candidate.overrides, "candidates=null", f"resume={str(own_resume).lower()}"]
        )
        rename_targets(cand_cfg)
        missing = needs_missing_package(cand_cfg)
        if missing:
            skipped[candidate.name] = missing
            log.warning("candidate %s skipped: %s", candidate.name, missing)
            continue
        log.info(
            "candidate %d of %d: %s (%s) in %s",
            number,
            len(plan_.candidates),
            candidate.name,
            " ".join(candidate.overrides) or "the configuration as given",
            folder,
        )
        made = missing_folders(folder)
        start = time.perf_counter()
        try:
            # The corpus's problems are the run's: reported in the run directory, not the candidate's.
            prepared = phases.prepare(cand_cfg, folder, run_dir)
        except BaseException:
            # A candidate stopped before training leaves no folder of its own: only the config.yaml
            # it had just written there, in folders made for it.
            remove_unused(made, ("config.yaml",))
            raise
        prepared.module.share_frames(store)
        fitted = phases.fit(prepared, folder)
        outcome = phases.test(fitted)
        # Each candidate is exported in its folder: any of them can score, join an ensemble or be
        # evaluated on another corpus (eval.py export=<run dir>/candidates/<name>/export).
        phases.finish(fitted, outcome, folder, folder / "export", result=False)
        rule: SelectionRule = prepared.module.selection
        metric, level, mode = comparison(rule)
        value, interval, valid = validated(prepared.module.predictor, prepared, metric, level)
        clips, seconds = len(valid.test_predictions), time.perf_counter() - start
        log.info("candidate %s: %.0f s", candidate.name, seconds)
        tried.append(
            Tried(
                candidate,
                prepared,
                fitted,
                outcome,
                value,
                interval,
                clips,
                valid.test_results,
                seconds,
                folder,
            )
        )
    if not tried:
        raise ValueError(
            f"no candidate could be trained: {'; '.join(f'{k}: {v}' for k, v in skipped.items())}"
        )
    if plan_.ensemble:
        joined = ensemble_of_best(tried, metric, level, mode, phases.result)
        tried += [joined] if joined else []
    winner = pick(tried, mode, tolerance)
    rec = record(tried, winner, skipped, metric, level, mode)
    log.info("%s", describe(rec))
    # The winner's splits and configuration become the run's own, beside its export.
    source = winner.folder
    for name in ("config.yaml", "valid_split.csv", "test_split.csv"):
        if (source / name).is_file():
            atomic_write_text(run_dir / name, (source / name).read_text(encoding="utf-8"))
    if winner.candidate.name.startswith(ENSEMBLE):
        finish_ensemble(winner, tried, run_dir, rec)
    else:
        phases.finish(winner.fitted, winner.outcome, run_dir, run_dir / "export", {"candidates": rec})
    return winner.outcome


def finish_ensemble(winner: Tried, tried: Sequence[Tried], run_dir: Path, rec: dict[str, Any]) -> None:
    """Write the winning ensemble's test outputs and learning check to `run_dir` and export it."""
    prepared, module = winner.prepared, winner.fitted
    datamodule, settings, cfg = prepared.datamodule, prepared.settings, prepared.cfg
    by_name = {t.candidate.name: t for t in tried}
    members = [by_name[name] for name in winner.members]
    info = {
        **prepared.info,
        "candidates": rec,
        "ensemble": {
            "method": "mean",
            "members": [
                {
                    "name": t.candidate.name,
                    "backbone": type(t.prepared.module.predictor.backbone).__name__,
                    "seed": settings.seed,
                    **{
                        f"{level}_srcc": _test_summary(t.outcome.test)[level]["srcc"]
                        for level in ("utt", "sys")
                    },
                }
                for t in members
            ],
        },
    }
    valid_rmse, _ = validation_score(winner.valid, "rmse", "utt")
    labels = [c.mos for c in datamodule.corpus.valid_as_test().clips]
    train_mean = float(np.mean([c.mos for c in datamodule.train_clips]))
    info["learning_check"] = constant_check(module, train_mean, (valid_rmse, labels) if labels else None)
    info["scale_shift"] = scale_shift(datamodule)
    atomic_write_json(run_dir / "run_info.json", info)
    write_test_outputs(
        module,
        run_dir,
        heading=f"Test results ({winner.candidate.name})",
        score_range=datamodule.corpus.score_range,
        sigma=run_sigma(info["learning_check"]),
    )
    export_dir = run_dir / "export"
    export_predictor(
        module.predictor,
        export_dir,
        sample_rate=datamodule.sample_rate,
        domains=datamodule.corpus.domains,
        metrics=module.test_results,
        dimension_metrics=module.dimension_results,
        overwrite=settings.overwrite_export,
        f0_extractor=datamodule.f0_extractor,
        data=recorded_data(cfg, export_dir, info.get("test_split_csv")),
        test={"seed": settings.seed, "bootstrap": settings.bootstrap},
        run_info=info,
        files=[run_dir / info[key] for key in ("valid_split_csv", "test_split_csv") if key in info],
        inputs=run_inputs(cfg),
        vocal_only=datamodule.vocal_only,
    )
    log.info("Exported %s to %s", winner.candidate.name, export_dir)
    check = info["learning_check"]
    (log.info if check["verdict"] == "better" else log.warning)("%s", learning.sentence(check))
