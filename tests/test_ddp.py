"""Two-process DDP on CPU (gloo): gathered predictions give exactly the one-process metrics."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import lightning as L
import torch
from hydra import compose, initialize_config_dir

from sqa.data.datamodule import EpochSampler, eval_batches
from sqa.training import build

from .conftest import REPO


def test_epoch_sampler_gives_ranks_equal_disjoint_shares():
    shares = [list(EpochSampler(11, seed=3, num_replicas=2, rank=r)) for r in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == 5
    indices = [i for share in shares for i, _ in share]
    assert len(set(indices)) == 10
    single = [i for i, _ in EpochSampler(11, seed=3)]
    assert set(indices) < set(single)


def test_eval_batches_of_all_ranks_are_the_single_process_batches():
    single = eval_batches(23, 4)
    assert single == [list(range(i, min(i + 4, 23))) for i in range(0, 23, 4)]
    assert single[-1] == [20, 21, 22]
    parts = [eval_batches(23, 4, 4, r) for r in range(4)]
    assert [len(p) for p in parts] == [2, 2, 2, 2]
    # Two batches are repeated to even out the ranks; each is one of the single-process batches.
    assert sorted(b for part in parts for b in part) == sorted(single + single[:2])
    # A set smaller than one batch still gives every rank a batch.
    assert eval_batches(3, 16, 2, 1) == [[0, 1, 2]]


def test_two_process_ddp_reports_the_one_process_metrics(synthetic_root, tmp_path):
    run_dir = tmp_path / "ddp"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "train.py",
        f"data.corpus.root={synthetic_root}",
        f"hydra.run.dir={run_dir}",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.strategy=ddp",
        "trainer.max_steps=12",
        "trainer.val_check_interval=6",
        "trainer.enable_progress_bar=false",
        "early_stopping_patience=null",
    ]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Starting with 2 processes" in result.stdout + result.stderr
    ddp_metrics = json.loads((run_dir / "metrics.json").read_text())
    with (run_dir / "predictions.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    # Every test clip appears once: nothing dropped or duplicated by sharding.
    assert len({r["sample_id"] for r in rows}) == len(rows)

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "train", overrides=[f"data.corpus.root={synthetic_root}", "trainer.enable_progress_bar=false"]
        )
    datamodule, module = build(cfg)
    assert len(rows) == sum(len(c) for c in datamodule.corpus.test_sets().values())
    best = next((run_dir / "checkpoints").glob("best-*.ckpt"))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        default_root_dir=tmp_path,
    )
    torch.set_num_threads(1)
    trainer.test(module, datamodule=datamodule, ckpt_path=str(best), verbose=False)
    # Exact equality: each clip was scored in the same batch as here and the rows are merged back
    # into dataset order before any metric is computed.
    assert json.loads(json.dumps(module.test_results)) == ddp_metrics
