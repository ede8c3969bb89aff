"""Steps 4 and 5 of a run: test the models on the test sets, then write the results and export.

One tail serves every winner: a single model's fit (its checkpoint selection, curves and logger
figures go with it) and the candidates' ensemble (the mean of two tested members) alike. Each
candidate's own folder is finished the same way, without the run's last line.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from sqa.core import signals
from sqa.core.atomic import atomic_write_json, atomic_write_text
from sqa.exports.format import export_predictor
from sqa.reports import learning
from sqa.reports.plots import CurveNames, write_curves
from sqa.training.candidates import Tried, describe, member_record, record, tested_on, validation_score
from sqa.training.checkpoint_io import checkpoint_step
from sqa.training.data_record import recorded_data
from sqa.training.experiment_loggers import hparam_metrics, log_figures, log_hparams
from sqa.training.fitting import Fitted
from sqa.training.retrieval import build_datastore
from sqa.training.run_dir import run_inputs
from sqa.training.run_outputs import (
    constant_check,
    curve_set_names,
    describe_objective,
    learning_check,
    objective_record,
    report_selection,
    run_sigma,
    scale_shift,
    write_test_outputs,
)

log = logging.getLogger(__name__)

# The files of the winning candidate that become the run's own, beside its export.
WINNER_FILES = ("config.yaml", "valid_split.csv", "test_split.csv")


def test(tried: Sequence[Tried]) -> None:
    """Test each model of `tried` on its test sets (a sweep's trial: none); each keeps its `tested` module.

    Candidates and their ensemble are tested by `evaluation.tested`, as eval.py tests an export,
    their frames shared through the run's store (an ensemble member's test clips pass its network
    once); the configuration alone by its own trainer at its selected checkpoint, on every device
    it trained on.
    """
    signals.stage("testing")
    for entry in tried:
        prepared = entry.prepared
        with entry.timed():
            if prepared.name is not None:
                entry.tested = tested_on(entry.predictor, prepared, prepared.datamodule.corpus)
            elif prepared.settings.test_after_fit:
                fitted = entry.fitted
                fitted.trainer.test(
                    prepared.module, datamodule=prepared.datamodule, ckpt_path=fitted.best_path, verbose=False
                )
                entry.tested = prepared.module


def export(
    winner: Tried,
    tried: Sequence[Tried],
    skipped: dict[str, str],
    run_dir: Path,
    peer: str | None = None,
    cross_validation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write every model's results and export; the winner's are the run's. Returns its run_info record.

    `peer` names the candidate that every other is judged against as the pretrained peer (None: none);
    `cross_validation` is the record of the cross-validation that chose the winner (None: validation did).
    """
    signals.stage("writing the results and the export")
    if winner.prepared.name is None:
        return finish(winner, run_dir)
    peer_entry = next((e for e in tried if e.name == peer and e.tested is not None), None) if peer else None
    for entry in tried:
        if entry.fitted is not None:
            # Each candidate is exported in its folder: any of them can score, join an ensemble or be
            # evaluated on another corpus (eval.py export=<run dir>/candidates/<name>/export).
            with entry.timed():
                finish(entry, entry.prepared.folder, result=False, peer=peer_entry)
        log.info("candidate %s: %.0f s", entry.name, entry.seconds)
    rec = record(tried, winner, skipped, cross_validation)
    log.info("%s", describe(rec))
    # The winner's splits and configuration become the run's own, beside its export.
    for name in WINNER_FILES:
        source = winner.prepared.folder / name
        if source.is_file():
            atomic_write_text(run_dir / name, source.read_text(encoding="utf-8"))
    extra: dict[str, Any] = {"candidates": rec}
    if winner.members:
        extra["ensemble"] = member_record(winner, tried)
    return finish(winner, run_dir, extra, peer=peer_entry)


def finish(
    entry: Tried,
    folder: Path,
    extra: dict[str, Any] | None = None,
    result: bool = True,
    peer: Tried | None = None,
) -> dict[str, Any]:
    """Write `entry`'s selection, curves, test outputs and learning check to `folder`; export it there.

    `extra` is added to run_info.json (and the export's card). `result` marks the run's own
    result: it alone gets a retrieval datastore and says the learning check as the run's last line.
    The learning check also judges the ranking against `peer` (the pretrained peer; not itself).
    A sweep's trial (test_after_fit=false) writes its selection and curves only.
    """
    prepared, fitted, module = entry.prepared, entry.fitted, entry.tested
    cfg, settings, datamodule = prepared.cfg, prepared.settings, prepared.datamodule
    info = {**prepared.info, "selection": dict(prepared.info["selection"]), **(extra or {})}
    curves = _Curves.of(fitted)
    if fitted is not None:
        info["training_end"] = fitted.end
        info["objective"] = objective_record(prepared.module.selection, _objective(fitted))
        if not settings.test_after_fit:
            return _validated_only(fitted, info, folder, curves)
    info["scale_shift"] = scale_shift(datamodule)
    info["learning_check"] = _learning_check(entry, curves.step, peer if peer is not entry else None)
    datastore = None
    if fitted is not None and result and (cfg.get("retrieval") or {}).get("datastore"):
        # The selected model's embeddings of the training clips, for kNN and fusion scoring.
        datastore, info["retrieval"] = build_datastore(entry.predictor, datamodule)
    if fitted is not None:
        report_selection(info, curves.history.get("val/selection", []), curves.best, curves.step, folder)
    else:
        atomic_write_json(folder / "run_info.json", info)
    figures = write_test_outputs(
        module,
        folder,
        curves.history,
        heading=f"Test results ({f'best checkpoint {curves.best}' if curves.best else entry.name})",
        score_range=datamodule.corpus.score_range,
        selected_step=curves.step,
        names=curves.names,
        sigma=run_sigma(info["learning_check"]),
    )
    if fitted is not None:
        log_figures(fitted.logger, figures, step=fitted.trainer.global_step)
        metrics = hparam_metrics(curves.history, curves.step, module.test_results)
        log_hparams(fitted.logger, fitted.params, metrics, fitted.trainer.global_step)
    export_dir = folder / "export"
    export_predictor(
        entry.predictor,
        export_dir,
        sample_rate=datamodule.sample_rate,
        domains=datamodule.corpus.domains,
        metrics=module.test_results,
        dimension_metrics=module.dimension_results,
        # A resumed candidate replaces its own folder's export, which this run wrote (export_predictor
        # still refuses a folder that is not sqa's); the run's export needs overwrite_export.
        overwrite=settings.overwrite_export or (settings.resume and not result),
        overwrite_setting="overwrite_export=true",
        f0_extractor=datamodule.f0_extractor,
        data=recorded_data(cfg, export_dir, info.get("test_split_csv")),
        test={"seed": settings.seed, "bootstrap": settings.bootstrap},
        run_info=info,
        training=OmegaConf.to_container(cfg, resolve=True) if fitted is not None else None,
        files=[folder / info[key] for key in ("valid_split_csv", "test_split_csv") if key in info],
        inputs=run_inputs(cfg),
        vocal_only=datamodule.vocal_only,
        datastore=datastore,
    )
    log.info("Exported %s to %s", entry.name if entry.members else "the best model", export_dir)
    if result:
        # The run's last line: whether the model beats predicting the training mean.
        check = info["learning_check"]
        (log.info if check["verdict"] == "better" else log.warning)("%s", learning.sentence(check))
    return info


@dataclass(frozen=True)
class _Curves:
    """A fit's logged history, selected checkpoint (file name, step) and curve names; None for an ensemble."""

    history: dict[str, list[tuple[int, float]]] | None = None
    best: str | None = None
    step: int | None = None
    names: CurveNames | None = None

    @classmethod
    def of(cls, fitted: Fitted | None) -> _Curves:
        """The curves of `fitted` (None: none)."""
        if fitted is None:
            return cls()
        module, datamodule = fitted.prepared.module, fitted.prepared.datamodule
        return cls(
            fitted.history,
            Path(fitted.best_path).name,
            checkpoint_step(fitted.best_path),
            CurveNames(module.selection.label, curve_set_names(datamodule)),
        )


def _objective(fitted: Fitted) -> float:
    """The best selection score as a quantity to maximise (errors and losses negated), for sweeps."""
    score = float(fitted.callbacks["checkpoint"].best_model_score)
    return score if fitted.prepared.module.selection.mode == "max" else -score


def _validated_only(fitted: Fitted, info: dict[str, Any], folder: Path, curves: _Curves) -> dict[str, Any]:
    """A sweep's trial: its selection and curves only.

    Chosen on validation alone: the test set stays unseen until the chosen settings run once with testing.
    """
    history, trainer, logger = fitted.history, fitted.trainer, fitted.logger
    report_selection(info, history.get("val/selection", []), curves.best, curves.step, folder)
    drawn = write_curves(history, folder / "plots", curves.step, curves.names)
    log_figures(logger, {"plots/curves": drawn}, step=trainer.global_step)
    log_hparams(logger, fitted.params, hparam_metrics(history, curves.step), trainer.global_step)
    log.info("Validation only (test_after_fit=false): %s was neither tested nor exported", curves.best)
    log.info("Objective (what a sweep maximises): %s", describe_objective(info["objective"]))
    return info


def _learning_check(entry: Tried, selected_step: int | None, peer: Tried | None) -> dict[str, Any]:
    """`entry` against the constant training mean and `peer`'s ranking (`sqa.reports.learning`).

    The validation RMSE is a fit's at its selected check, the ensemble's from its validation scoring.
    """
    datamodule = entry.prepared.datamodule
    against = (peer.name, peer.tested) if peer is not None else None
    if entry.fitted is not None:
        return learning_check(entry.tested, datamodule, entry.fitted.history, selected_step, against)
    valid_rmse, _ = validation_score(entry.valid or {}, "rmse", "utt")
    labels = [c.mos for c in datamodule.corpus.valid_as_test().clips]
    train_mean = float(np.mean([c.mos for c in datamodule.train_clips]))
    return constant_check(entry.tested, train_mean, (valid_rmse, labels) if labels else None, against)
