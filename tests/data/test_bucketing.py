import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from sqa.data.samplers import BucketBatchSampler
from sqa.training.run import run
from tests.conftest import REPO


def padded_fraction(batches, lengths):
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return 1 - sum(lengths[i] for b in batches for i in b) / padded


# About the size and clip-length spread of SingMOS-Pro's training set (mean about 5 s).
LENGTHS = np.random.default_rng(0).lognormal(np.log(5 * 16000), 0.5, 4000).astype(int).tolist()


def test_same_seed_and_epoch_give_the_same_batches_and_epochs_differ():
    a = BucketBatchSampler(LENGTHS, batch_size=15, seed=3)
    b = BucketBatchSampler(LENGTHS, batch_size=15, seed=3)
    assert list(a) == list(b)
    first = a.batches()
    a.set_epoch(1)
    assert a.batches() != first
    assert all(epoch == 1 for batch in a for _, epoch in batch)


def test_every_clip_once_and_less_padding_than_random_batches():
    sampler = BucketBatchSampler(LENGTHS, batch_size=15, seed=0)
    batches = sampler.batches()
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    order = np.random.default_rng(0).permutation(len(LENGTHS)).tolist()
    random_batches = [order[i : i + 15] for i in range(0, len(order), 15)]
    assert padded_fraction(batches, LENGTHS) < 0.05 < padded_fraction(random_batches, LENGTHS)


def test_batches_by_padded_samples_respect_the_cap():
    cap = 60 * 16000
    batches = BucketBatchSampler(LENGTHS, max_batch_samples=cap, seed=0).batches()
    assert all(max(LENGTHS[i] for i in b) * len(b) <= cap or len(b) == 1 for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))


def test_ranks_get_equal_shares_of_distinct_batches():
    shares = [
        BucketBatchSampler(LENGTHS, batch_size=16, seed=0, num_replicas=3, rank=r).batches() for r in range(3)
    ]
    assert len({len(s) for s in shares}) == 1
    seen = [i for share in shares for b in share for i in b]
    assert len(seen) == len(set(seen))
    with pytest.raises(ValueError, match="rank"):
        BucketBatchSampler(LENGTHS, batch_size=16, num_replicas=2, rank=2)


def test_a_bucketed_run_trains_on_length_buckets_within_the_padded_seconds_cap(
    synthetic_root, tmp_path, monkeypatch
):
    from sqa.training.lit_module import MOSModule

    lengths_seen = []
    original = MOSModule.training_step

    def recording(self, batch, batch_idx):
        lengths_seen.append(batch["lengths"].tolist())
        return original(self, batch, batch_idx)

    monkeypatch.setattr(MOSModule, "training_step", recording)
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"data.corpus.root={synthetic_root}",
                "data.bucketing=true",
                "data.max_batch_seconds=20",
                "trainer.max_steps=40",
                "trainer.val_check_interval=40",
                "trainer.enable_progress_bar=false",
                "bootstrap=0",
            ],
        )
    # The run goes on to validate and test as an unbucketed one does.
    assert run(cfg, tmp_path).test["avg"]["utt"]["n"] > 0
    assert len(lengths_seen) == 40
    cap = 20 * cfg.data.sample_rate
    for lengths in lengths_seen:
        assert max(lengths) * len(lengths) <= cap or len(lengths) == 1
    # Clips of similar length share a batch: little padding, and more clips than batch_size
    # (8) where they are short. Random batches of 8 pad about a third of their samples.
    padded = sum(max(lengths) * len(lengths) for lengths in lengths_seen)
    assert 1 - sum(map(sum, lengths_seen)) / padded < 0.1
    assert max(len(lengths) for lengths in lengths_seen) > cfg.data.batch_size
