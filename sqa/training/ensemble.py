"""`sqa-ensemble`: several exports (seeds, backbones, families) written as one ensemble export.

    sqa-ensemble runs/s0 runs/s1 runs/s2 --output runs/ensemble                 # the mean
    sqa-ensemble runs/s0 runs/s1 runs/s2 --output runs/ensemble --method ridge  # fitted weights

The ensemble (`sqa.models.ensemble.EnsemblePredictor`) is one export that holds every member's
weights; it loads, scores and evaluates as any export. Members share the sample rate, rating
scale, score dimensions and frame rate, the f0 settings where they use pitch and the domain list
where they use domain IDs; a mismatch is an error naming the member.

`--method ridge` fits, per score dimension, weights and an intercept by ridge regression of the
validation labels on the members' predictions of the validation clips: minimise
|y - b - X w|² + alpha |w|² (the intercept b unpenalised), with X and y on the internal 1-5
scale so that `alpha` means the same on every rating scale. The validation clips are those of
the corpus each export records (with its run's carved splits), predicted as `eval.py` predicts
test clips; every member must record the same ones. Where every member records the same
corpus, the ensemble records it too, and its metrics.json holds its test metrics there, computed
as `eval.py` computes them (so `eval.py export=<ensemble>` reproduces them).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import math
import os
import platform
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import nn

from sqa.core.artefacts import score_columns
from sqa.core.prediction import OVERALL
from sqa.core.provenance import package_versions
from sqa.core.resolvers import default_precision
from sqa.data.audio import AudioError
from sqa.data.corpus import DEFAULT_DOMAIN, Clip, Corpus, CorpusError
from sqa.data.pitch import F0Extractor
from sqa.data.readers import recorded_corpus
from sqa.data.valid_split import read_valid_split
from sqa.exports.format import (
    ExportError,
    check_replaceable,
    export_json,
    export_predictor,
    load_export,
    regular_file,
    resolve_export,
)
from sqa.metrics import AVERAGE_KEY
from sqa.models.ensemble import EnsemblePredictor, member_mismatch
from sqa.training.datamodule import MOSDataModule
from sqa.training.evaluation import DEFAULT_EVAL_BATCH_SIZE, clips_to_test, evaluation_corpus, recorded_split
from sqa.training.lit_module import MOSModule

log = logging.getLogger(__name__)

METHODS = ("mean", "ridge")
# sklearn's Ridge default: mild shrinkage for members' predictions spread about 1 on the 1-5 scale.
DEFAULT_ALPHA = 1.0
# The carved validation split a run's export holds (`sqa.training.run`).
VALID_SPLIT = "valid_split.csv"


class EnsembleError(ValueError):
    """Exports that cannot be one ensemble, or ensemble weights that cannot be fitted."""


@dataclass
class Member:
    """An export joining the ensemble: its name as given, folder, predictor, config.yaml, f0 extractor."""

    name: str
    directory: Path
    predictor: nn.Module
    config: dict[str, Any]
    f0_extractor: F0Extractor | None


def read_member(path: str | Path) -> Member:
    """The export at `path` loaded as a member (checked as for scoring); an ensemble is refused."""
    predictor, config, f0_extractor = load_export(path)
    if isinstance(predictor, EnsemblePredictor):
        raise EnsembleError(f"{path}: is itself an ensemble; name the exports of its members instead")
    return Member(str(path), resolve_export(path)[0].parent, predictor, config, f0_extractor)


def check_members(members: Sequence[Member]) -> None:
    """EnsembleError naming the first member that cannot join the first one (see the module docstring)."""
    first = members[0]
    for member in members[1:]:
        if member.config["sample_rate"] != first.config["sample_rate"]:
            raise EnsembleError(
                f"{member.name}: scores audio at {member.config['sample_rate']} Hz, {first.name} at "
                f"{first.config['sample_rate']} Hz; an ensemble's members share one sample rate"
            )
    mismatch = member_mismatch([m.predictor for m in members])
    if mismatch is not None:
        index, how = mismatch
        raise EnsembleError(f"{members[index].name} {how} (the first member: {first.name})")
    pitched = [m for m in members if m.f0_extractor is not None]
    for member in pitched[1:]:
        if member.config["f0"] != pitched[0].config["f0"]:
            raise EnsembleError(
                f"{member.name}: extracts f0 with {member.config['f0']}, {pitched[0].name} with "
                f"{pitched[0].config['f0']}; members with a pitch branch share one f0 extractor"
            )
    with_domains = [m for m in members if m.predictor.domain_count is not None]
    for member in with_domains[1:]:
        if member.config.get("domains") != with_domains[0].config.get("domains"):
            raise EnsembleError(
                f"{member.name}: embeds domains {member.config.get('domains')}, {with_domains[0].name} "
                f"{with_domains[0].config.get('domains')}; members with domain IDs share one domain list"
            )


def member_corpus(member: Member) -> Corpus | None:
    """The corpus `member`'s export records, split as its run split it (test, then validation); None: none."""
    record = member.config.get("data") or {}
    if not record.get("corpus"):
        return None
    where = member.directory / "config.yaml"
    corpus = recorded_corpus(record["corpus"], where)
    corpus = clips_to_test(
        corpus, recorded_split(member.directory, record.get("test_split_csv")), False, where
    )
    if (member.directory / VALID_SPLIT).exists():
        split = regular_file(member.directory, VALID_SPLIT)
        corpus = corpus.with_valid(read_valid_split(split), split)
    return corpus


def clip_keys(clips: Sequence[Clip]) -> list[tuple[Any, ...]]:
    """What members' clips must agree on (ID, split, set, role, domain, system, labels), sorted by ID."""
    return sorted(
        (c.sample_id, c.split, c.test_set or "", c.role or "", c.domain, c.system_id, c.mos)
        + tuple(sorted(c.extra_scores.items()))
        for c in clips
    )


def shared_corpus(corpora: Sequence[Corpus | None]) -> Corpus | None:
    """The first corpus where every member records one with the same clips, splits and labels; else None."""
    if any(corpus is None for corpus in corpora):
        return None
    first = clip_keys(corpora[0].clips)
    return corpora[0] if all(clip_keys(c.clips) == first for c in corpora[1:]) else None


def validation_corpus(members: Sequence[Member], corpora: Sequence[Corpus | None]) -> Corpus:
    """The validation clips every member shares, as the test sets (one per domain) of a corpus."""

    def valid_clips(corpus: Corpus) -> list[Clip]:
        return [c for clips in corpus.valid_sets().values() for c in clips]

    for member, corpus in zip(members, corpora, strict=True):
        if corpus is None or not valid_clips(corpus):
            raise EnsembleError(
                f"{member.name}: records no corpus with validation clips, so it has no validation "
                "predictions to fit ridge weights on; use --method mean (or the exports of training runs)"
            )
    first = clip_keys(valid_clips(corpora[0]))
    for member, corpus in zip(members[1:], corpora[1:], strict=True):
        keys = clip_keys(valid_clips(corpus))
        if keys != first:
            raise EnsembleError(
                f"{member.name}: its run validated on other clips ({len(keys)}) than {members[0].name}'s "
                f"({len(first)}); ridge weights are fitted on validation clips that every member shares: "
                "use --method mean, or members trained on the same validation split"
            )
    clips = [
        replace(c, split="test", test_set=name)
        for name, group in corpora[0].valid_sets().items()
        for c in group
    ]
    return Corpus(clips, corpora[0].domains, corpora[0].score_range, corpora[0].systems)


def tested(
    predictor: nn.Module,
    corpus: Corpus,
    config: dict[str, Any],
    f0_extractor: F0Extractor | None,
    batch_size: int,
    seed: int = 0,
    bootstrap: int = 0,
) -> MOSModule:
    """`predictor` run over `corpus`'s test clips as `eval.py` runs it; the module holds rows and metrics.

    `config` is the export's config.yaml (its sample rate and domains).
    """
    domains = list(config.get("domains") or [DEFAULT_DOMAIN])
    datamodule = MOSDataModule(
        evaluation_corpus(corpus, domains, predictor.domain_count is not None),
        sample_rate=int(config["sample_rate"]),
        eval_batch_size=batch_size,
        f0_extractor=f0_extractor,
        dimensions=list(predictor.dimensions),
        required_splits=("test",),
    )
    module = MOSModule(
        predictor, loss=None, optimizer=None, test_names=datamodule.test_names, seed=seed, bootstrap=bootstrap
    )
    with tempfile.TemporaryDirectory(prefix="sqa-ensemble-") as scratch:
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


def fit_ridge(predictions: np.ndarray, labels: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """Weights (M,) and intercept b minimising |labels - b - predictions·w|² + alpha·|w|²; predictions (n, M).

    labels (n,).
    """
    mean_x, mean_y = predictions.mean(axis=0), float(labels.mean())
    # Centred, the unpenalised intercept drops out of the normal equations.
    x, y = predictions - mean_x, labels - mean_y
    weights = np.linalg.solve(x.T @ x + alpha * np.eye(x.shape[1]), x.T @ y)
    return weights, mean_y - float(mean_x @ weights)


def ridge_weights(
    members: Sequence[Member], valid: Corpus, batch_size: int, alpha: float
) -> tuple[list[list[float]], list[float]]:
    """Ridge weights (K, M) and intercepts (K,) per score dimension, on the internal scale.

    Each dimension is fitted on the validation clips labelled with it.
    """
    rows = [
        tested(m.predictor, valid, m.config, m.f0_extractor, batch_size).test_predictions for m in members
    ]
    weights, intercepts = [], []
    for dim in members[0].predictor.dimensions:
        true_key, pred_key = score_columns(None if dim == OVERALL else dim)
        labels = {r["sample_id"]: r[true_key] for r in rows[0] if not math.isnan(r[true_key])}
        if len(labels) < 2:
            raise EnsembleError(
                f"{len(labels)} validation clip(s) have a {dim!r} score; ridge weights need at least 2"
            )
        ids = sorted(labels)
        preds = [{r["sample_id"]: r[pred_key] for r in member_rows} for member_rows in rows]
        x = np.array([[p[i] for p in preds] for i in ids], dtype=np.float64)
        y = np.array([labels[i] for i in ids], dtype=np.float64)
        to_internal = members[0].predictor.to_internal
        w, b = fit_ridge(
            to_internal(torch.from_numpy(x)).numpy(), to_internal(torch.from_numpy(y)).numpy(), alpha
        )
        weights.append([float(v) for v in w])
        intercepts.append(b)
        log.info(
            "ridge weights of %s on %d validation clips: %s, intercept %.4g", dim, len(ids), w.round(4), b
        )
    return weights, intercepts


def member_record(member: Member) -> dict[str, Any]:
    """What the ensemble's card says of a member: name, backbone, seed and its own test SRCC."""
    info = export_json(member.directory, "run_info.json")
    metrics = export_json(member.directory, "metrics.json")
    blocks = {k: v for k, v in metrics.items() if isinstance(v, dict)} if isinstance(metrics, dict) else {}
    block = blocks.get(AVERAGE_KEY) or (next(iter(blocks.values())) if len(blocks) == 1 else {})
    # A run's export is <run dir>/export: the run directory names it.
    name = member.directory.parent.name if member.directory.name == "export" else member.directory.name
    return {
        "name": name,
        "backbone": type(member.predictor.backbone).__name__,
        "seed": info.get("seed") if isinstance(info, dict) else None,
        "utt_srcc": (block.get("utt") or {}).get("srcc"),
        "sys_srcc": (block.get("sys") or {}).get("srcc"),
    }


def rebased_data(member: Member, output: Path) -> dict[str, Any]:
    """`member`'s recorded data with the corpus folder relative to the ensemble's folder `output`."""
    data = dict(member.config["data"])
    corpus = dict(data["corpus"])
    if corpus.get("root") is not None:
        folder = (member.directory / str(corpus["root"])).resolve()
        corpus["root"] = os.path.relpath(folder, output.resolve())
    data["corpus"] = corpus
    return data


def build_ensemble(
    exports: Sequence[str | Path],
    output: str | Path,
    method: str = "mean",
    alpha: float = DEFAULT_ALPHA,
    overwrite: bool = False,
    batch_size: int | None = None,
) -> Path:
    """Write the ensemble of `exports` to `output` (replaced only if `overwrite` and sqa's); returns it.

    `method` "mean" weighs every member 1/M; "ridge" fits weights on the validation predictions
    with regularisation `alpha` (> 0). `batch_size` (None: the first member's recorded one)
    batches validation and test clips.
    """
    output = Path(output)
    if method not in METHODS:
        raise EnsembleError(f"method must be one of {METHODS}, got {method!r}")
    if not (math.isfinite(alpha) and alpha > 0):
        raise EnsembleError(f"alpha must be a positive number, got {alpha}")
    if len(exports) < 2:
        raise EnsembleError(f"an ensemble needs at least 2 exports, got {len(exports)}")
    if output.exists() and not overwrite:
        raise ExportError(f"{output}: already exists; pass --overwrite to replace it")
    # Before any member is scored: a folder that may not be replaced is refused at once.
    check_replaceable(output, exports)
    members = [read_member(path) for path in exports]
    check_members(members)
    first = members[0]
    size = batch_size or int(
        (first.config.get("data") or {}).get("eval_batch_size") or DEFAULT_EVAL_BATCH_SIZE
    )
    corpora = [member_corpus(m) for m in members]
    count = len(members)
    dimensions = len(first.predictor.dimensions)
    record: dict[str, Any] = {"method": method}
    if method == "ridge":
        valid = validation_corpus(members, corpora)
        weights, intercept = ridge_weights(members, valid, size, alpha)
        record.update(alpha=alpha, validation_clips=len(valid.clips))
    else:
        weights, intercept = [[1.0 / count] * count for _ in range(dimensions)], [0.0] * dimensions
    record["members"] = [member_record(m) for m in members]
    ensemble = EnsemblePredictor([m.predictor for m in members], weights, intercept).eval()
    pitched = [m for m in members if m.f0_extractor is not None]
    f0_extractor = pitched[0].f0_extractor if pitched else None
    with_domains = [m for m in members if m.predictor.domain_count is not None]
    config = {**first.config, "domains": (with_domains or members)[0].config.get("domains") or []}
    info: dict[str, Any] = {
        "sqa": importlib.metadata.version("sqa"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(("torch", "lightning", "numpy", "scipy", "soundfile", "soxr")),
        "ensemble": record,
    }
    corpus = shared_corpus(corpora)
    metrics, dimension_metrics, data, test, files = {}, None, None, None, []
    if corpus is not None:
        test = dict(first.config.get("test") or {})
        module = tested(
            ensemble,
            corpus,
            config,
            f0_extractor,
            size,
            int(test.get("seed", 0)),
            int(test.get("bootstrap", 0)),
        )
        metrics, dimension_metrics = module.test_results, module.dimension_results
        data = rebased_data(first, output)
        first_info = export_json(first.directory, "run_info.json")
        if isinstance(first_info, dict) and "corpus" in first_info:
            info["corpus"] = first_info["corpus"]
        # Its run's carved splits, so that eval.py finds the same test clips.
        names = (data.get("test_split_csv"), VALID_SPLIT)
        files = [regular_file(first.directory, n) for n in names if n and (first.directory / n).exists()]
    else:
        log.info(
            "the members record different corpora (or none): the ensemble records no corpus and no test "
            "metrics; evaluate it with eval.py export=%s data=<corpus>",
            output,
        )
    return export_predictor(
        ensemble,
        output,
        int(first.config["sample_rate"]),
        config["domains"],
        metrics,
        overwrite=overwrite,
        f0_extractor=f0_extractor,
        dimension_metrics=dimension_metrics,
        data=data,
        test=test,
        run_info=info,
        files=files,
        inputs=[m.directory for m in members],
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-ensemble`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="sqa-ensemble", description=__doc__.split("\n")[0])
    parser.add_argument(
        "exports", nargs="+", help="the members: export folders (or run folders holding export/)"
    )
    parser.add_argument("--output", "-o", required=True, help="the ensemble's export folder to write")
    parser.add_argument(
        "--method", choices=METHODS, default="mean", help="mean: weights 1/M; ridge: fitted on validation"
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        help="ridge regularisation, on the 1-5 scale (default 1)",
    )
    parser.add_argument("--batch-size", type=int, default=None, help="clips per batch when predicting")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing ensemble export")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        out = build_ensemble(
            args.exports, args.output, args.method, args.alpha, args.overwrite, args.batch_size
        )
    except (EnsembleError, ExportError, CorpusError, AudioError) as err:
        print(f"sqa-ensemble: {err}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
