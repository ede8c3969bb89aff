"""The same file gets bit-identical scores on CPU across runs, batch sizes, batch mates and threads."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

from sqa.scoring.scorer import Scorer


@pytest.fixture
def one_thread():
    """Restores the test process's intra-op thread count after a test that changes it."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_scores_are_bit_identical_across_runs_batch_sizes_and_threads(default_export, tmp_path, one_thread):
    rng = np.random.default_rng(0)
    paths = [tmp_path / f"c{i}.wav" for i in range(4)]
    # Different lengths: in a batch of 4, the first three clips are padded to the longest.
    for i, path in enumerate(paths):
        sf.write(path, 0.1 * rng.standard_normal(6000 + 3000 * i), 16000, subtype="FLOAT")
    runs = {}
    # Two runs of one setting, then each other batch size and thread count.
    for key in [(1, 1, 0), (1, 1, 1), (1, 4, 0), (2, 1, 0), (2, 4, 0)]:
        threads, batch_size, _ = key
        torch.set_num_threads(threads)
        scorer = Scorer(default_export, batch_size=batch_size)
        runs[key] = [r.score for r in scorer.score_files(paths, num_workers=0)]
    reference = runs[1, 1, 0]
    assert all(isinstance(s, float) for s in reference)
    for key, scores in runs.items():
        assert scores == reference, key
