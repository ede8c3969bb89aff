"""Two-process DDP on CPU (gloo): training shards, a synchronised step, and evaluation.

Gathered predictions give exactly the one-process metrics; one DDP training step gives every
rank the same weights, those of one process's step on the global batch.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import lightning as L
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from sqa.training.datamodule import BucketBatchSampler, EpochSampler, eval_batches
from sqa.training.run import build
from tests.conftest import REPO, small_corpus_overrides


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


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread, as the DDP processes use, for this test only."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Two processes training side by side: a minute on 2 cores, so with the slow trainings.
@pytest.mark.slow
def test_two_process_ddp_reports_the_one_process_metrics(small_synthetic_root, tmp_path, one_thread):
    run_dir = tmp_path / "ddp"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    # Evaluation batches of 4: each rank scores a share of every set, so the metrics need the
    # gathered rows (a set smaller than one batch is scored whole by every rank).
    corpus = [*small_corpus_overrides(small_synthetic_root), "data.eval_batch_size=4"]
    cmd = [
        sys.executable,
        "train.py",
        *corpus,
        f"hydra.run.dir={run_dir}",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.strategy=ddp",
        "trainer.max_steps=6",
        "trainer.val_check_interval=3",
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
        cfg = compose("train", overrides=[*corpus, "trainer.enable_progress_bar=false"])
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
    trainer.test(module, datamodule=datamodule, ckpt_path=str(best), verbose=False)
    # Exact equality: each clip was scored in the same batch as here and the rows are merged back
    # into dataset order before any metric is computed.
    assert json.loads(json.dumps(module.test_results)) == ddp_metrics


def test_training_shards_are_disjoint_and_cover_the_epoch_but_for_fewer_than_world_size():
    for size, world in ((40, 2), (41, 2), (23, 4), (7, 3)):
        for epoch in (0, 1):
            shares = []
            for rank in range(world):
                sampler = EpochSampler(size, seed=5, num_replicas=world, rank=rank)
                sampler.set_epoch(epoch)
                shares.append([i for i, e in sampler if e == epoch])
            seen = [i for share in shares for i in share]
            assert len({len(s) for s in shares}) == 1 and len(seen) == len(set(seen))
            assert set(seen) <= set(range(size)) and size - len(seen) < world
    # The few clips left out change from epoch to epoch, so none is never trained on.
    left_out = set()
    for epoch in range(6):
        seen = set()
        for rank in range(3):
            sampler = EpochSampler(7, seed=5, num_replicas=3, rank=rank)
            sampler.set_epoch(epoch)
            seen |= {i for i, _ in sampler}
        left_out |= set(range(7)) - seen
    assert len(left_out) > 1


def test_bucketed_training_shards_are_disjoint_and_cover_the_epoch():
    lengths = np.random.default_rng(0).integers(8000, 160000, 203).tolist()
    for world in (2, 3):
        batches = {}
        for rank in range(world):
            sampler = BucketBatchSampler(lengths, batch_size=8, seed=1, num_replicas=world, rank=rank)
            batches[rank] = sampler.batches()
        all_batches = BucketBatchSampler(lengths, batch_size=8, seed=1).batches()
        seen = [i for share in batches.values() for b in share for i in b]
        assert len({len(s) for s in batches.values()}) == 1 and len(seen) == len(set(seen))
        # Whole batches are shared out: fewer than `world` of the single process's are left over.
        shared = sorted(tuple(b) for share in batches.values() for b in share)
        assert set(shared) <= {tuple(b) for b in all_batches}
        assert len(all_batches) - len(shared) < world


def _one_step(root: str, overrides: list[str], devices: int, batch_size: int) -> dict[str, torch.Tensor]:
    """Initial and trained weights after one optimiser step of the configured run."""
    from tests.training.test_train import compose_train

    cfg = compose_train([f"data.corpus.root={root}", *overrides, f"data.batch_size={batch_size}"])
    L.seed_everything(0)
    datamodule, module = build(cfg)
    initial = {k: v.detach().clone() for k, v in module.predictor.state_dict().items()}
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_steps=1,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        gradient_clip_val=cfg.trainer.gradient_clip_val,
        precision="32-true",
        use_distributed_sampler=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=datamodule)
    return {
        "initial": initial,
        "trained": {k: v.detach().clone() for k, v in module.predictor.state_dict().items()},
    }


def _ddp_worker(rank: int, world: int, port: int, root: str, overrides: list[str], out: str) -> None:
    # The variables torchrun sets: Lightning then joins the group instead of launching processes.
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(world),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        NODE_RANK="0",
    )
    torch.set_num_threads(1)
    torch.save(_one_step(root, overrides, world, PER_RANK_BATCH), f"{out}/rank{rank}.pt")


PER_RANK_BATCH = 4


@pytest.mark.slow
def test_a_ddp_step_equals_a_one_process_step_on_the_global_batch(tmp_path, one_thread):
    from sqa.data.synthetic import generate

    root = generate(tmp_path / "corpus", seed=0, clips_per_system=14, systems_per_batch=(3, 3, 3, 2, 2))
    # Dropout off: ranks draw distinct masks by design, which one process cannot reproduce.
    overrides = ["model.dropout=0.0", "data.preload=false", "+data.corpus.systems_per_batch=[3,3,3,2,2]"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    torch.multiprocessing.spawn(
        _ddp_worker, args=(2, port, str(root), overrides, str(tmp_path)), nprocs=2, join=True
    )
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    single = _one_step(str(root), overrides, 1, 2 * PER_RANK_BATCH)
    for key, initial in single["initial"].items():
        assert torch.equal(ranks[0]["initial"][key], initial)
        # Every rank holds the same weights after the synchronised step ...
        assert torch.equal(ranks[0]["trained"][key], ranks[1]["trained"][key]), key
        # ... and made the update one process makes on the whole global batch.
        ddp_update = ranks[0]["trained"][key] - initial
        one_update = single["trained"][key] - initial
        # atol: float32 rounding of weights of about 1 (the updates themselves are 1e-6 to 1e-3).
        torch.testing.assert_close(ddp_update, one_update, rtol=1e-3, atol=1e-7)
    changed = max((single["trained"][k] - v).abs().max().item() for k, v in single["initial"].items())
    assert changed > 1e-5


def test_dropout_masks_differ_between_ranks_and_repeat_for_a_rank_and_step():
    from types import SimpleNamespace

    from sqa.models.backbone import LogMelBackbone
    from sqa.models.predictor import MOSPredictor
    from sqa.training.lit_module import MOSModule
    from sqa.training.losses import margin_l1

    module = MOSModule(MOSPredictor(LogMelBackbone()), loss=margin_l1, optimizer=torch.optim.SGD, seed=3)
    dropout = module.predictor.head[2]
    dropout.train()

    def mask(rank: int, step: int) -> torch.Tensor:
        # The step hook as the trainer of DDP rank `rank` calls it before step `step`.
        module._trainer = SimpleNamespace(global_rank=rank, global_step=step)
        module.on_train_batch_start({}, 0)
        return dropout(torch.ones(2000)) == 0

    assert torch.equal(mask(0, 5), mask(0, 5)) and torch.equal(mask(1, 5), mask(1, 5))
    assert not torch.equal(mask(0, 5), mask(1, 5))
    assert not torch.equal(mask(0, 5), mask(0, 6))
