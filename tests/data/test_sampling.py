"""Training data in a real run: epoch order, random crops of long clips and the f0 slice that follows.

One short run with a pitch branch on a small synthetic corpus records every training item it
is given, then checks it against references that do not reuse the code under test: the f0 that
the extractor finds on the cropped audio itself, clip lengths from the file headers, and the
test-set averages recomputed from predictions.csv with clip and system counts.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import soundfile as sf
import torch
from scipy import stats

from sqa.data.dataset import ClipDataset
from sqa.data.pitch import F0Extractor
from sqa.data.samplers import EpochSampler
from sqa.data.synthetic import generate, load_synthetic
from sqa.models.branches import MidiPitchBranch
from sqa.training.run import run
from tests.training.test_train import compose_train

SYSTEMS = (4, 3, 3, 2, 2)
CLIPS = 6
MAX_SECONDS = 10.0
SR = 16000
HOP = 320  # 20 ms f0 frames at 16 kHz


def test_epoch_order_changes_with_the_epoch_and_is_a_function_of_seed_and_epoch():
    orders = {}
    sampler = EpochSampler(40, seed=3)
    for epoch in range(4):
        sampler.set_epoch(epoch)
        items = list(sampler)
        assert all(e == epoch for _, e in items)
        orders[epoch] = [i for i, _ in items]
        assert sorted(orders[epoch]) == list(range(40))
    assert len({tuple(o) for o in orders.values()}) == 4
    fresh = EpochSampler(40, seed=3)
    fresh.set_epoch(2)
    assert [i for i, _ in fresh] == orders[2]
    other_seed = EpochSampler(40, seed=4)
    other_seed.set_epoch(2)
    assert [i for i, _ in other_seed] != orders[2]


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    return generate(
        tmp_path_factory.mktemp("small") / "corpus", seed=0, clips_per_system=CLIPS, systems_per_batch=SYSTEMS
    )


@pytest.fixture(scope="module")
def pitch_run(small_root, tmp_path_factory):
    """Two epochs with the MIDI pitch branch; every training item the loader produced."""
    run_dir = tmp_path_factory.mktemp("pitch-run")
    items: list[dict] = []
    original = ClipDataset.__getitem__

    def recording(self, key):
        item = original(self, key)
        if isinstance(key, tuple):  # training items are keyed (index, epoch)
            items.append(
                {
                    "key": key,
                    "wav": item["wav"].numpy(),
                    "f0": item["f0"].numpy(),
                    "sample_id": item["sample_id"],
                }
            )
        return item

    overrides = [
        f"data.corpus.root={small_root}",
        f"data.corpus.clips_per_system={CLIPS}",
        f"+data.corpus.systems_per_batch=[{','.join(map(str, SYSTEMS))}]",
        f"data.max_train_seconds={MAX_SECONDS}",
        "model.pitch=midi",
        f"f0.cache_dir={run_dir / 'f0'}",
        "trainer.max_epochs=2",
        "trainer.val_check_interval=4",
        "trainer.enable_progress_bar=false",
        "early_stopping_patience=null",
        "bootstrap=0",
    ]
    notes: list[tuple[torch.Tensor, torch.Tensor]] = []
    branch_init, branch_forward = MidiPitchBranch.__init__, MidiPitchBranch.forward

    def init_recording(self, *args, **kwargs):
        branch_init(self, *args, **kwargs)
        # What the note embedding is given: the MIDI notes of the aligned f0 (B, T).
        self.note.register_forward_pre_hook(lambda _, inputs: notes.append((inputs[0].clone(), self.lengths)))

    def forward_recording(self, f0, frame_lengths, num_frames):
        self.lengths = frame_lengths.clone()
        return branch_forward(self, f0, frame_lengths, num_frames)

    patch = pytest.MonkeyPatch()
    patch.setattr(ClipDataset, "__getitem__", recording)
    patch.setattr(MidiPitchBranch, "__init__", init_recording)
    patch.setattr(MidiPitchBranch, "forward", forward_recording)
    try:
        run(compose_train(overrides), run_dir / "run")
    finally:
        patch.undo()
    corpus = load_synthetic(small_root, seed=0, clips_per_system=CLIPS, systems_per_batch=SYSTEMS)
    return run_dir / "run", items, corpus, notes


def test_the_pitch_branch_receives_the_notes_of_the_sung_f0(pitch_run):
    *_, notes = pitch_run
    assert notes
    voiced_share, pitches = [], []
    for batch, lengths in notes:
        for row, n in zip(batch, lengths.tolist(), strict=True):
            valid = row[:n]
            voiced_share.append((valid > 0).float().mean().item())
            pitches.append(valid[valid > 0].float().median().item())
    # The synthetic phrases are sung throughout but for short breaths, from MIDI 52 to 80.
    assert np.median(voiced_share) > 0.7 and min(voiced_share) > 0.3
    assert min(pitches) >= 50 and max(pitches) <= 82


def test_every_epoch_visits_every_training_clip_in_a_new_order(pitch_run):
    _, items, corpus, _ = pitch_run
    n_train = len(corpus.split("train"))
    by_epoch: dict[int, list[int]] = {}
    for item in items:
        by_epoch.setdefault(item["key"][1], []).append(item["key"][0])
    assert sorted(by_epoch) == [0, 1]
    for order in by_epoch.values():
        assert sorted(order) == list(range(n_train))
    assert by_epoch[0] != by_epoch[1]


def test_long_training_clips_are_cropped_every_epoch_and_short_ones_kept_whole(pitch_run):
    _, items, corpus, _ = pitch_run
    seconds = {c.sample_id: sf.info(str(c.path)).duration for c in corpus.split("train")}
    long_ids = {s for s, d in seconds.items() if d > MAX_SECONDS}
    assert len(long_ids) >= 3
    crops = [it for it in items if it["wav"].shape[0] == MAX_SECONDS * SR]
    # One crop per long clip per epoch, and no other item reaches the crop length.
    assert sorted(it["sample_id"] for it in crops) == sorted(list(long_ids) * 2)
    for it in items:
        if it["sample_id"] not in long_ids:
            assert it["wav"].shape[0] == pytest.approx(seconds[it["sample_id"]] * SR, abs=2)
    starts = {}
    for it in crops:
        full = ClipDataset([c for c in corpus.clips if c.sample_id == it["sample_id"]], corpus, SR)[0]["wav"]
        start = _offset(full.numpy(), it["wav"])
        assert start % HOP == 0  # crops start on an f0 frame
        starts.setdefault(it["sample_id"], []).append(start)
    # The crop moves between epochs (a fixed crop would never show the rest of the clip).
    assert all(len(set(s)) == 2 for s in starts.values())


def test_the_f0_track_follows_the_crop(pitch_run):
    _, items, _, _ = pitch_run
    extractor = F0Extractor()
    crops = [it for it in items if it["wav"].shape[0] == MAX_SECONDS * SR]
    for it in crops:
        assert it["f0"].shape[0] == MAX_SECONDS * SR // HOP + 1
        # Reference: the extractor run on the cropped audio itself (edges excluded).
        own = extractor.compute(it["wav"].astype(np.float64), SR)[5:-5]
        sliced = it["f0"][5:-5]
        both = (own > 0) & (sliced > 0)
        assert both.sum() > 0.8 * max((own > 0).sum(), (sliced > 0).sum())
        assert np.median(np.abs(sliced[both] / own[both] - 1)) < 0.01


def test_a_resumed_epoch_crops_alike(pitch_run, small_root):
    _, items, corpus, _ = pitch_run
    crops = [it for it in items if it["wav"].shape[0] == MAX_SECONDS * SR]
    fresh = ClipDataset(corpus.split("train"), corpus, SR, MAX_SECONDS, f0_extractor=F0Extractor())
    for it in crops:
        again = fresh[it["key"]]
        np.testing.assert_array_equal(again["wav"].numpy(), it["wav"])
        np.testing.assert_array_equal(again["f0"].numpy(), it["f0"])


def test_averages_weight_sets_by_clip_and_system_counts(pitch_run):
    run_dir, _, _, _ = pitch_run
    saved = json.loads((run_dir / "metrics.json").read_text())
    with (run_dir / "predictions.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    sets = sorted({r["test_set"] for r in rows})
    clips = {s: [r for r in rows if r["test_set"] == s] for s in sets}
    systems = {s: sorted({r["system_id"] for r in clips[s]}) for s in sets}
    # Precondition: clip counts are not proportional to system counts, so a swap shows.
    assert len({len(clips[s]) / len(systems[s]) for s in sets}) > 1
    utt = {
        s: stats.pearsonr([float(r["pred"]) for r in clips[s]], [float(r["mos"]) for r in clips[s]])[0]
        for s in sets
    }
    sys_lcc = {}
    for s in sets:
        means = [
            [np.mean([float(r[k]) for r in clips[s] if r["system_id"] == sid]) for sid in systems[s]]
            for k in ("pred", "mos")
        ]
        sys_lcc[s] = stats.pearsonr(*means)[0]
    n_utt = {s: len(clips[s]) for s in sets}
    n_sys = {s: len(systems[s]) for s in sets}
    expected_utt = sum(utt[s] * n_utt[s] for s in sets) / sum(n_utt.values())
    expected_sys = sum(sys_lcc[s] * n_sys[s] for s in sets) / sum(n_sys.values())
    assert saved["avg"]["utt"]["lcc"] == pytest.approx(expected_utt)
    assert saved["avg"]["sys"]["lcc"] == pytest.approx(expected_sys)
    swapped = sum(utt[s] * n_sys[s] for s in sets) / sum(n_sys.values())
    assert abs(swapped - expected_utt) > 1e-6


def _offset(full: np.ndarray, crop: np.ndarray) -> int:
    """Start of `crop` (N,) inside `full` (M,), found by exact match."""
    for start in range(0, full.shape[0] - crop.shape[0] + 1):
        if full[start] == crop[0] and np.array_equal(full[start : start + crop.shape[0]], crop):
            return start
    raise AssertionError("the crop is not a segment of its clip")
