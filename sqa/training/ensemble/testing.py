"""A predictor (an ensemble's member or the ensemble) run over a corpus's test clips as `eval.py` runs it."""

from __future__ import annotations

import tempfile
from typing import Any

import lightning as L
from torch import nn

from sqa.core.resolvers import default_precision
from sqa.data.corpus import DEFAULT_DOMAIN, Corpus
from sqa.data.pitch import F0Extractor
from sqa.training.datamodule import MOSDataModule
from sqa.training.evaluation import evaluation_corpus
from sqa.training.frame_cache import FrameStore
from sqa.training.lit_module import MOSModule
from sqa.training.run_dir import quiet_lightning


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
) -> MOSModule:
    """`predictor` run over `corpus`'s test clips as `eval.py` runs it; the module holds rows and metrics.

    `config` is the export's config.yaml (its sample rate, domains and vocal-only setting);
    `num_workers` and `on_error` are the data module's (decoding processes, bad clips). With
    `frame_store`, a predictor's backbone frames come from (and go to) the store's cache of that backbone.
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
    # Lightning's hardware lines and adverts would repeat once per predictor and corpus (sqa-bench).
    with tempfile.TemporaryDirectory(prefix="sqa-ensemble-") as scratch, quiet_lightning():
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
