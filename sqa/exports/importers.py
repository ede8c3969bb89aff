"""Command line: convert a released MOS predictor, downloaded by the user, into an sqa export.

    sqa-import singmos_pro ft_wav2vec2_large_ll60k_mdf_p1_200epochs_all_192epochs.pth exports/singmos_pro
    sqa-import singmos_v1 ft_wav2vec2_base_960_23steps.pt exports/singmos_v1
    sqa-import sheet checkpoint-86000steps.pkl exports/sheet --sheet-config config.yml

Layouts, read from the public code that loads these files:
- `singmos_pro`, `singmos_v1`: the state_dict of the SingMOS-Pro authors' torch.hub entries
  (South-Twilight/SingMOS, singmos/ssl_mos/singmos_pro.py and singmos_v1.py): an s3prl
  `S3PRLUpstream` wav2vec2 under "ssl_model.ssl_model.upstream.model.", then for singmos_pro a
  domain embedding "domain_emb" (6 IDs) and the head "decoder.net.{0,3}" (Linear, ReLU, Dropout,
  Linear, 2·tanh+3), for singmos_v1 one "linear" layer on each frame (no range clip).
- `sheet`: an SSLMOS checkpoint of SHEET (unilight/sheet, sheet/models/sslmos.py), a state_dict or
  a trainer checkpoint {"model": state_dict, ...}: `S3PRLUpstream` under "ssl_model.upstream.model."
  and the mean net "mean_net_dnn.net.{0,3}"; its config.yml names the s3prl upstream and the head.

The released files hold the fine-tuned wav2vec2 weights but not its architecture: that comes from
the s3prl-converted upstream checkpoint (model_cfg, task_cfg) that s3prl keeps in its cache when
the predictor was used through torch.hub, or from `--upstream-checkpoint FILE`. Nothing is
downloaded. The input normalisation follows that task_cfg, as s3prl's own expert does, and of
the task_cfg only `normalize` is kept (fairseq's pretraining crop sizes are no part of a scorer).
The architecture is sized against the export's own limits (`sqa.load`'s) before it is built. Every
import pools frame scores as these predictors do (`pooling: s3prl_padded_mean`: the mean over
s3prl's ceil(N/320) output frames, the last one repeated), so it scores as its authors' code.
Its model card is named after the release, with what it was trained on as far as known and its
authors (`sqa.exports.model_card.RELEASES`); run_info.json records the release's kind and files.
The layouts are read in `sqa.exports.releases`; this module builds, sizes and exports.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

from sqa.core.provenance import package_versions

# The bounds `sqa.load` checks an export's config.yaml against: one rule for import and load.
from sqa.exports.bounds import MAX_PARAMETERS
from sqa.exports.bounds import _check_bounds as check_bounds
from sqa.exports.format import ExportError, export_predictor
from sqa.exports.releases import (
    SAMPLE_RATE,
    SHEET_SSL,
    SINGMOS_PRO_DEFAULT_DOMAIN,
    SINGMOS_SSL,
    SINGMOS_UPSTREAMS,
    Converted,
    LayoutError,
    convert_sheet,
    convert_singmos_pro,
    convert_singmos_v1,
    read_sheet_config,
    read_weights,
)
from sqa.models.predictor import MOSPredictor
from sqa.models.ssl import S3prlWav2Vec2, s3prl_cached_checkpoint, s3prl_configs, s3prl_upstream_names

# Every public name this module had, the release layouts now in `sqa.exports.releases` included.
__all__ = [
    "KINDS",
    "SAMPLE_RATE",
    "SHEET_SSL",
    "SINGMOS_PRO_DEFAULT_DOMAIN",
    "SINGMOS_SSL",
    "SINGMOS_UPSTREAMS",
    "SOURCE_POOLING",
    "Converted",
    "LayoutError",
    "build_predictor",
    "convert_sheet",
    "convert_singmos_pro",
    "convert_singmos_v1",
    "import_predictor",
    "main",
    "read_sheet_config",
    "read_weights",
]

KINDS = ("singmos_pro", "singmos_v1", "sheet")
# singmos_pro.py, singmos_v1.py and SHEET's SSLMOS all take torch.mean over S3PRLUpstream's output.
SOURCE_POOLING = "s3prl_padded_mean"


def _assemble(converted: Converted, model_cfg: dict, task_cfg: dict) -> MOSPredictor:
    """The predictor of `converted` on the upstream architecture, randomly initialised."""
    backbone = S3prlWav2Vec2(model_config=model_cfg, task_config=task_cfg)
    return MOSPredictor(
        backbone,
        head_dim=converted.head_dim,
        range_clip=converted.range_clip,
        num_domains=max(len(converted.domains), 1),
        domain_dim=converted.domain_dim,
        pooling=SOURCE_POOLING,
    )


def _check_size(converted: Converted, model_cfg: dict, task_cfg: dict, upstream: Path, source: Path) -> None:
    """Refuse, before anything is allocated, what `sqa.load` would refuse in the export.

    The rules are the export's own: every integer of model_cfg within the config bounds (checked
    first, since even the meta device builds a declared layer count one module at a time), then
    the predictor built on the meta device (no memory) within MAX_PARAMETERS, its export config
    within the same bounds.
    """
    check_bounds(model_cfg, ("model_cfg",), upstream)
    try:
        with torch.device("meta"):
            sized = _assemble(converted, model_cfg, task_cfg)
    except Exception as error:  # s3prl's config classes raise TypeError, AssertionError, ... on junk
        raise LayoutError(f"{upstream}: cannot build a wav2vec2 from its model_cfg ({error})") from error
    count = sum(t.numel() for t in (*sized.parameters(), *sized.buffers()))
    if count > MAX_PARAMETERS:
        layers, width = len(sized.backbone.model.encoder.layers), sized.backbone.output_dim
        raise LayoutError(
            f"{upstream}: its model_cfg declares a wav2vec2 of {layers} layers of width {width}, {count} "
            f"parameters with the head; an sqa export holds at most {MAX_PARAMETERS}, so nothing was built"
        )
    check_bounds(sized.export_config(), ("model",), source)


def build_predictor(converted: Converted, upstream_checkpoint: str | None, source: Path) -> MOSPredictor:
    """The sqa predictor holding `converted`'s weights; the architecture comes from the upstream.

    The architecture is sized (`_check_size`) before it is built, so an import writes only what loads.
    """
    names = s3prl_upstream_names()
    if converted.upstream not in names:
        raise LayoutError(
            f"{source}: s3prl upstream {converted.upstream!r} is not a wav2vec2 model; sqa imports "
            f"the s3prl wav2vec2 entries {names}"
        )
    if upstream_checkpoint is not None:
        upstream = Path(upstream_checkpoint).expanduser()
    else:
        upstream = s3prl_cached_checkpoint(converted.upstream)
    model_cfg, task_cfg = s3prl_configs(checkpoint=str(upstream))
    _check_size(converted, model_cfg, task_cfg, upstream, source)
    predictor = _assemble(converted, model_cfg, task_cfg)
    state = {f"backbone.model.{k}": v for k, v in converted.ssl.items()} | converted.other
    own = predictor.state_dict()
    missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    wrong = [k for k in set(own) & set(state) if own[k].shape != state[k].shape]
    if missing or extra or wrong:
        raise LayoutError(
            f"{source} does not match the {converted.upstream} architecture: missing {missing[:8]}, "
            f"unexpected {extra[:8]}, different shapes {sorted(wrong)[:8]}"
        )
    predictor.load_state_dict(state)
    return predictor.eval()


def import_predictor(
    kind: str,
    weights: str | Path,
    output: str | Path,
    sheet_config: str | Path | None = None,
    upstream_checkpoint: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Convert the released `kind` predictor in `weights` into an sqa export at `output`."""
    weights = Path(weights).expanduser()
    if kind == "singmos_pro":
        converted = convert_singmos_pro(weights)
    elif kind == "singmos_v1":
        converted = convert_singmos_v1(weights)
    elif kind == "sheet":
        if sheet_config is None:
            raise LayoutError("sheet needs --sheet-config (the config.yml released with the checkpoint)")
        converted = convert_sheet(weights, Path(sheet_config).expanduser())
    else:
        raise LayoutError(f"kind must be one of {KINDS}, got {kind!r}")
    predictor = build_predictor(converted, upstream_checkpoint, weights)
    # The export never replaces a folder holding the files it was converted from.
    inputs = [path for path in (weights, sheet_config, upstream_checkpoint) if path]
    # The model card names the release and its authors (`model_card.RELEASES`); file names, not paths.
    release = {
        "kind": kind,
        "weights": weights.name,
        "upstream": converted.upstream,
        "sqa": package_versions(["sqa"])["sqa"],
    }
    if sheet_config is not None:
        release["config"] = Path(sheet_config).name
    return export_predictor(
        predictor,
        output,
        SAMPLE_RATE,
        converted.domains,
        overwrite=overwrite,
        overwrite_setting="--overwrite",
        run_info={"release": release},
        inputs=inputs,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-import`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="sqa-import", description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("weights", help="the released weights file (a local file; nothing is downloaded)")
    parser.add_argument("output", help="export directory to write")
    parser.add_argument("--sheet-config", help="sheet: the config.yml released with the checkpoint")
    parser.add_argument(
        "--upstream-checkpoint",
        help="s3prl-converted wav2vec2 file giving the architecture (default: s3prl's cache)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing export")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        out = import_predictor(
            args.kind, args.weights, args.output, args.sheet_config, args.upstream_checkpoint, args.overwrite
        )
    except (FileNotFoundError, ValueError, ExportError) as err:
        print(f"sqa-import: {err}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
