"""`sqa-ensemble`: several exports (seeds, backbones, families) written as one ensemble export.

    sqa-ensemble runs/s0 runs/s1 runs/s2 --output runs/ensemble                 # the mean
    sqa-ensemble runs/s0 runs/s1 runs/s2 --output runs/ensemble --method ridge  # fitted weights

The ensemble (`sqa.models.ensemble.EnsemblePredictor`) is one export that holds every member's
weights; it loads, scores and evaluates as any export. Members share the sample rate, rating
scale, score dimensions and frame rate, `vocal_only` (which the ensemble records, so that scoring
trims clips as its members were trained), the f0 settings where they use pitch and the domain
list where they use domain IDs; a mismatch is an error naming the member.

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
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqa.core.provenance import package_versions
from sqa.data.audio import AudioError
from sqa.data.corpus import CorpusError
from sqa.exports.format import ExportError, check_replaceable, export_json, export_predictor, regular_file
from sqa.models.ensemble import EnsemblePredictor
from sqa.training.ensemble.members import (
    VALID_SPLIT,
    EnsembleError,
    check_members,
    member_corpus,
    member_record,
    read_member,
    rebased_data,
    shared_corpus,
)
from sqa.training.ensemble.ridge import DEFAULT_ALPHA, ridge_weights, validation_corpus
from sqa.training.evaluation import DEFAULT_EVAL_BATCH_SIZE, tested

log = logging.getLogger(__name__)

METHODS = ("mean", "ridge")


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
        overwrite_setting="--overwrite",
        f0_extractor=f0_extractor,
        dimension_metrics=dimension_metrics,
        data=data,
        test=test,
        run_info=info,
        files=files,
        inputs=[m.directory for m in members],
        vocal_only=bool(first.config.get("vocal_only")),
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
