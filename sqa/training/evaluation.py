"""Evaluate-only: score every test set of a labelled corpus with an exported model.

    python eval.py export=<export dir>                                # the corpus the export records
    python eval.py export=<export dir> data.corpus.root=DIR           # ... which has moved to DIR
    python eval.py export=<export dir> data=csv data.corpus.path=m.csv  # another corpus

Writes metrics.json (metrics_<dim>.json), predictions.csv and plots/ into the output folder
exactly as a training run's test phase does (the same module, metrics and writer), so a run's
export evaluated on its own corpus reproduces its metrics.json. Test sets whose labels sit far
from the export's training labels are named (`sqa.reports.scale`, eval_info.json's
`scale_shift`). With `map_clips=N`, a least-squares line from the model's scores to the labels is
fitted on N seeded test clips, which then leave the evaluation; metrics.json holds the unmapped
scores of the other clips and mapped/ the same files for their mapped scores. A corpus named on
the command line without any split (one table of ratings) is evaluated whole.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import numpy as np
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from sqa.core.atomic import atomic_write_text
from sqa.core.renames import rename_targets
from sqa.core.resolvers import default_precision
from sqa.core.run_folder import claimed, discard_previous
from sqa.core.run_lock import RunDirError
from sqa.data.audio import AudioError
from sqa.data.corpus import DEFAULT_DOMAIN, ROLES, Corpus, CorpusError
from sqa.data.pitch import F0Extractor
from sqa.data.readers import recorded_corpus
from sqa.data.valid_split import read_valid_split
from sqa.exports.format import ExportError, load_export, regular_file, resolve_export, run_record
from sqa.exports.residual import VALID_RMSE_SOURCE, residual_sigma
from sqa.reports import scale
from sqa.training.datamodule import MOSDataModule
from sqa.training.frame_cache import FrameStore
from sqa.training.lit_module import MOSModule
from sqa.training.run_dir import quiet_lightning, run_inputs
from sqa.training.run_outputs import shift_record, write_test_outputs

log = logging.getLogger(__name__)

# Used where neither the command line nor the export says otherwise (train.yaml's defaults).
DEFAULT_SEED = 0
DEFAULT_BOOTSTRAP = 1000
DEFAULT_EVAL_BATCH_SIZE = 8
# The random stream of the map's clips (beside the bootstrap's, from the same seed).
MAP_STREAM = 5


def clips_to_test(corpus: Corpus, split_csv: str | Path | None, named: bool, where: Path) -> Corpus:
    """`corpus` with the clips to evaluate as its test split.

    Its own test clips; else those of `split_csv` (the test split a run carved from it); else,
    for a corpus `named` on the command line without any split (one table of ratings), every
    clip, said in one line. Otherwise a CorpusError names the settings that give test clips; the
    export's config.yaml (`where`) where the corpus is the one it records.
    """
    if corpus.split("test"):
        return corpus
    if split_csv is not None:
        # A run carved its test split from a corpus without one: the same clips are its test set.
        return corpus.with_test(read_valid_split(split_csv), split_csv)
    carved = "data.test_split_csv=<run dir>/test_split.csv"
    if named and not corpus.split("valid"):
        log.info(
            "the corpus has no test or validation clips (no split): evaluating all of its %d clips as "
            "test set 'test' (to evaluate only the test split a run carved from it instead: %s)",
            len(corpus.clips),
            carved,
        )
        return corpus.with_test([c.sample_id for c in corpus.clips], "the corpus")
    if named:
        raise CorpusError(
            "the corpus has no test clips to evaluate (its split names none); to evaluate the test "
            f"split a run carved from it: {carved}"
        )
    raise CorpusError(
        f"{where}: the corpus it records has no test clips, and the export no test split; name the "
        f"corpus and the test split a run carved from it: data=csv data.corpus.path=<table> {carved} "
        "(a table named without a split file is evaluated whole)"
    )


def evaluation_corpus(corpus: Corpus, domains: list[str], uses_domains: bool) -> Corpus:
    """The test clips of `corpus` with the export's `domains`.

    A clip of a domain the export does not know is scored as the export's first domain (as
    `sqa-score` does), with a warning when the model uses domain IDs.
    """
    clips = [c for c in corpus.clips if c.split == "test"]
    unknown = sorted({c.domain for c in clips} - set(domains))
    if unknown and uses_domains:
        log.warning("domains %s are unknown to the export; scored as its domain %r", unknown, domains[0])
    clips = [replace(c, domain=domains[0]) if c.domain in unknown else c for c in clips]
    return Corpus(clips, list(domains), corpus.score_range, corpus.systems)


def tested(
    predictor: nn.Module,
    corpus: Corpus,
    config: dict[str, Any],
    f0_extractor: F0Extractor | None,
    batch_size: int,
    seed: int = 0,
    bootstrap: int = 0,
    num_workers: int = 0,
    on_error: str = "raise",
    frame_store: FrameStore | None = None,
    trainer: L.Trainer | None = None,
) -> MOSModule:
    """`predictor` run over `corpus`'s test clips as `eval.py` runs it; the module holds rows and metrics.

    The one test pass of a predictor outside a run: eval.py's, an ensemble's and its members',
    the candidates' and sqa-bench's. `config` is the export's config.yaml (its sample rate, domains
    and vocal-only setting); `num_workers` and `on_error` are the data module's (decoding
    processes, bad clips; the clips tested are `module.trainer.datamodule.corpus`). With
    `frame_store`, a predictor's backbone frames come from (and go to) the store's cache of that
    backbone. `trainer` tests where given (eval.py's, from its config); else one device at the
    default precision, without Lightning's hardware lines, in a scratch folder.
    """
    domains = list(config.get("domains") or [DEFAULT_DOMAIN])
    datamodule = MOSDataModule(
        evaluation_corpus(corpus, domains, predictor.domain_count is not None),
        sample_rate=int(config["sample_rate"]),
        eval_batch_size=batch_size,
        f0_extractor=f0_extractor,
        dimensions=list(predictor.dimensions),
        required_splits=("test",),
        num_workers=num_workers,
        on_error=on_error,
        vocal_only=bool(config.get("vocal_only", False)),
    )
    module = MOSModule(
        predictor,
        loss=None,
        optimizer=None,
        test_names=datamodule.test_names,
        seed=seed,
        bootstrap=bootstrap,
        frame_store=frame_store,
    )
    if trainer is not None:
        trainer.test(module, datamodule=datamodule, verbose=False)
        return module
    # Lightning's hardware lines and adverts would repeat once per predictor and corpus (sqa-bench).
    with tempfile.TemporaryDirectory(prefix="sqa-tested-") as scratch, quiet_lightning():
        trainer = L.Trainer(
            accelerator="auto",
            devices=1,
            precision=default_precision(),
            logger=False,
            callbacks=[],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            use_distributed_sampler=False,
            default_root_dir=scratch,
        )
        trainer.test(module, datamodule=datamodule, verbose=False)
    return module


def recorded_split(export_dir: Path, name: object) -> Path | None:
    """The export's copy of its run's carved test split (`test_split.csv`), or None."""
    if name is None:
        return None
    # Only a file of the export itself, whatever the record says.
    return regular_file(export_dir, Path(str(name)).name)


def _choice(*values: Any) -> Any:
    """The first value that is not None."""
    return next(v for v in values if v is not None)


def evaluate(cfg: DictConfig, out_dir: str | Path) -> dict[str, Any]:
    """Score the test sets of `cfg.data` (or the export's recorded corpus); write and return the metrics.

    `out_dir` is claimed as a run directory is (`sqa.core.run_folder`): one evaluation at a time,
    and an earlier one's outputs replaced only with `overwrite=true`, once the new one is scored.
    """
    rename_targets(cfg)
    out_dir = Path(out_dir)
    with claimed(out_dir, resume=False, overwrite=bool(cfg.get("overwrite")), inputs=run_inputs(cfg)):
        return _evaluate(cfg, out_dir)


def _evaluate(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    """The body of `evaluate` in a claimed `out_dir`."""
    predictor, config, f0_extractor = load_export(cfg.export)
    # The export folder itself (`export` may name the run directory holding it): what its
    # recorded corpus and test split are relative to.
    export_dir = resolve_export(cfg.export)[0].parent
    recorded = config.get("data") or {}
    test = config.get("test") or {}
    user_corpus = OmegaConf.select(cfg, "data.corpus._target_") is not None
    if user_corpus:
        # The user's own config (a data group on the command line) is trusted like train.py's.
        corpus = instantiate(cfg.data.corpus)
        batch_size = cfg.data.get("eval_batch_size")
        source = OmegaConf.to_container(cfg.data.corpus, resolve=True)
        split_csv = cfg.data.get("test_split_csv")
    elif recorded.get("corpus"):
        root = OmegaConf.select(cfg, "data.corpus.root")
        corpus = recorded_corpus(recorded["corpus"], export_dir / "config.yaml", root)
        batch_size = recorded.get("eval_batch_size")
        source = {**recorded["corpus"], **({"root": root} if root is not None else {})}
        split_csv = recorded_split(export_dir, recorded.get("test_split_csv"))
    else:
        raise CorpusError(
            f"{export_dir / 'config.yaml'}: records no corpus; name one, e.g. data=csv data.corpus.path=..."
        )
    corpus = clips_to_test(corpus, split_csv, user_corpus, export_dir / "config.yaml")
    seed = int(_choice(cfg.seed, test.get("seed"), DEFAULT_SEED))
    bootstrap = int(_choice(cfg.bootstrap, test.get("bootstrap"), DEFAULT_BOOTSTRAP))
    # The user's trainer settings (accelerator, precision, devices, progress bar) hold for eval.py.
    trainer = instantiate(
        cfg.trainer, logger=False, callbacks=[], enable_checkpointing=False, default_root_dir=str(out_dir)
    )
    module = tested(
        predictor,
        corpus,
        config,
        f0_extractor,
        int(_choice(cfg.eval_batch_size, batch_size, DEFAULT_EVAL_BATCH_SIZE)),
        seed=seed,
        bootstrap=bootstrap,
        num_workers=cfg.num_workers,
        on_error=cfg.on_error,
        trainer=trainer,
    )
    # The clips scored: with on_error=skip, those that could be read.
    scored = module.trainer.datamodule.corpus
    # Every clip is scored: an earlier evaluation that overwrite=true set aside goes only now.
    discard_previous(out_dir)
    info = {
        "export": str(export_dir.resolve()),
        "corpus": source,
        "corpus_fingerprint": scored.fingerprint(),
        "seed": seed,
        "bootstrap": bootstrap,
    }
    score_range = scored.score_range
    trained = run_record(export_dir, "scale_shift")
    if trained is not None:
        info["scale_shift"] = test_shift(module.test_predictions, trained)
    map_clips = int(cfg.get("map_clips") or 0)
    if map_clips:
        mapped, info["scale_map"] = fitted_map(module, map_clips, seed)
    atomic_write_text(out_dir / "eval_info.json", json.dumps(info, indent=2))
    sigma, note = residual_sigma(export_dir)
    write_test_outputs(
        module,
        out_dir,
        heading=f"Test results of {export_dir}",
        score_range=score_range,
        sigma=(sigma, note or VALID_RMSE_SOURCE),
    )
    results = module.test_results
    if map_clips:
        line = info["scale_map"]
        module.set_test_rows(mapped)
        heading = f"Test results of {export_dir}, mapped by {line['a']:.4g} + {line['b']:.4g}·score"
        # The recorded RMSE is of unmapped scores, whose differences the map scales.
        unmapped = (None, "the export's RMSE is of unmapped scores, and the map scales score differences")
        write_test_outputs(
            module, out_dir / "mapped", heading=heading, score_range=score_range, sigma=unmapped
        )
    return results


def test_shift(rows: list[dict[str, Any]], trained: dict[str, Any]) -> dict[str, Any]:
    """Each test set's label shift from the export's training labels (`shift_record`), logged."""
    sets: dict[str, list[float]] = {}
    for r in rows:
        if r["test_set"] not in ROLES:
            sets.setdefault(r["test_set"], []).append(r["mos"])
    return shift_record(float(trained["train_mean"]), float(trained["train_sd"]), sets)


def fitted_map(module: MOSModule, clips: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Fit score → label on `clips` seeded test clips; keep the rest, unmapped, in `module`.

    Returns the rest with their overall scores mapped, and the map's record. The map's clips are
    left out of both the unmapped and the mapped metrics, so that the two compare on equal clips.
    """
    rows = module.test_predictions
    usable = [i for i, r in enumerate(rows) if r["test_set"] not in ROLES]
    if not 2 <= clips <= len(usable) - 2:
        raise CorpusError(
            f"map_clips={clips}: needs at least 2 clips to fit on and 2 to test on; the test sets have "
            f"{len(usable)} clips (references and anchors aside)"
        )
    chosen = set(np.random.default_rng([seed, MAP_STREAM]).choice(usable, clips, replace=False).tolist())
    fit = [rows[i] for i in sorted(chosen)]
    line = scale.fit_line([r["pred"] for r in fit], [r["mos"] for r in fit])
    if line is None:
        raise CorpusError(f"map_clips={clips}: the model gave one score to all {clips} clips; no line fits")
    rest = [r for i, r in enumerate(rows) if i not in chosen]
    module.set_test_rows(rest)
    a, b = line
    mapped = [{**r, "pred": a + b * r["pred"]} for r in rest]
    record = {"a": a, "b": b, "clips": clips, "sample_ids": [r["sample_id"] for r in fit]}
    return mapped, record


# An absolute path: Hydra reads a relative one as a Python package when main is imported.
@hydra.main(
    config_path=str(Path(__file__).resolve().parents[2] / "conf"), config_name="eval", version_base="1.3"
)
def main(cfg: DictConfig) -> None:
    """Entry point of `eval.py` and `sqa-eval`; a bad export, corpus or setting ends in one line."""
    try:
        evaluate(cfg, HydraConfig.get().runtime.output_dir)
    except (ExportError, CorpusError, AudioError, RunDirError) as err:
        # Hydra prints a traceback for an exception; an exit with the message prints the message.
        raise SystemExit(f"Error: {err}") from None


if __name__ == "__main__":
    main()
