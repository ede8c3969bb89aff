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
# The folder of each synthetic corpus under the data folder ($SQA_DATA_DIR, else data/).
SYNTHETIC = {
    "synthetic": "synthetic-seed{seed}-clips{clips}",
    "synthetic_mushra": "synthetic-mushra-seed{seed}-clips{clips}",
}


def corpus_source(args: argparse.Namespace) -> Path | None:
    """The file or folder the corpus is read from: the manifest (`csv`), else the corpus folder.

    A synthetic corpus without `--root` lies where conf/data/synthetic.yaml puts it, so that a
    training run's corpus is reused. None where the command line names neither.
    """
    if args.corpus == "csv":
        return args.manifest
    if args.root or args.corpus not in SYNTHETIC:
        return args.root
    return Path(os.environ.get("SQA_DATA_DIR", "data")) / SYNTHETIC[args.corpus].format(
        seed=args.seed, clips=args.clips_per_system
    )


def read_corpus(args: argparse.Namespace) -> Corpus:
    """The corpus named by the command line (`--corpus` with `--root` or `--manifest`)."""
    rate = args.sample_rate_filter
    rate = DEFAULT_RATE_FILTER.get(args.corpus) if rate is None else (rate or None)
    source = corpus_source(args)
    if args.corpus == "synthetic":
        return load_synthetic(
            source, seed=args.seed, clips_per_system=args.clips_per_system, sample_rate_filter=rate
        )
    if args.corpus == "synthetic_mushra":
        return load_synthetic_mushra(source, seed=args.seed, clips_per_system=args.clips_per_system)
    scale = args.score_range or BASELINE_RANGE
    if args.corpus == "csv":
        if not source:
            raise CorpusError("--corpus csv needs --manifest FILE")
        return read_csv_manifest(source, default_split="test", sample_rate_filter=rate, score_range=scale)
    if not source:
        raise CorpusError(f"--corpus {args.corpus} needs --root DIR")
    if args.corpus == "singmos_pro":
        return read_singmos_pro(source, sample_rate_filter=rate, score_range=scale)
    return read_vmc24(source, sample_rate_filter=rate, score_range=scale)
