"""The corpora `sqa-baseline` scores, read from its command line as a training run reads them."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sqa.data.corpus import Corpus, CorpusError
from sqa.data.readers import read_csv_manifest, read_singmos_pro, read_vmc24
from sqa.data.synthetic import load_synthetic, load_synthetic_mushra

CORPORA = ("synthetic", "synthetic_mushra", "singmos_pro", "singmos_vmc24", "csv")
# The baselines' own scale (DNSMOS and Distill-MOS alike): a corpus on it needs no map.
BASELINE_RANGE = (1.0, 5.0)
# The sample-rate filter of each corpus's data config, so test sets match a default training run.
DEFAULT_RATE_FILTER = {"singmos_pro": 16000}


def read_corpus(args: argparse.Namespace) -> Corpus:
    """The corpus named by the command line (`--corpus` with `--root` or `--manifest`)."""
    rate = args.sample_rate_filter
    rate = DEFAULT_RATE_FILTER.get(args.corpus) if rate is None else (rate or None)
    if args.corpus == "synthetic":
        # The same default location as conf/data/synthetic.yaml, so a training run's corpus is reused.
        root = args.root or (
            Path(os.environ.get("SQA_DATA_DIR", "data"))
            / f"synthetic-seed{args.seed}-clips{args.clips_per_system}"
        )
        return load_synthetic(
            root, seed=args.seed, clips_per_system=args.clips_per_system, sample_rate_filter=rate
        )
    if args.corpus == "synthetic_mushra":
        root = args.root or (
            Path(os.environ.get("SQA_DATA_DIR", "data"))
            / f"synthetic-mushra-seed{args.seed}-clips{args.clips_per_system}"
        )
        return load_synthetic_mushra(root, seed=args.seed, clips_per_system=args.clips_per_system)
    scale = args.score_range or BASELINE_RANGE
    if args.corpus == "csv":
        if not args.manifest:
            raise CorpusError("--corpus csv needs --manifest FILE")
        return read_csv_manifest(
            args.manifest, default_split="test", sample_rate_filter=rate, score_range=scale
        )
    if not args.root:
        raise CorpusError(f"--corpus {args.corpus} needs --root DIR")
    if args.corpus == "singmos_pro":
        return read_singmos_pro(args.root, sample_rate_filter=rate, score_range=scale)
    return read_vmc24(args.root, sample_rate_filter=rate, score_range=scale)
