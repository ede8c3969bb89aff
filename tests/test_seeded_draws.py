"""Regression fixtures for the seeded draws a user relies on across versions (issue 34, item 2).

Each test computes one seeded draw with today's code on a small fixed input and compares it with
values written out below: the test and validation clips carved by clip and by system, the
bootstrap resamples behind the 95 % intervals of metrics.json and of sqa-compare, and the built-in
synthetic corpus. Users compare runs made with different sqa versions on the same splits and
intervals, and a run records only its seed (and its split CSVs) in run_info.json and its export,
so a seed must keep drawing the same clips, resamples and corpus from one version to the next.

These values must not change by accident. When a change of a draw is intended (a new format of
the synthetic corpus, another carving or resampling scheme), regenerate the literal from today's
code, and state the change, and which seeds and splits it affects, in docs/testing.md and in the
release notes, so that users know that earlier runs' splits, intervals or corpora differ.
"""

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sqa import metrics
from sqa.core.resampling import bootstrap_indices
from sqa.data.corpus import Clip, Corpus
from sqa.data.synthetic import BATCHES, load_synthetic
from sqa.data.valid_split import carve_test, carve_valid
from sqa.reports.compare import compare

# A corpus of training clips only, as a user's table without a split column: systems of 1-6
# clips (H has one, so it can give none by clip). Only sample IDs and systems enter the draws.
CLIPS_PER_SYSTEM = {"A": 6, "B": 5, "C": 4, "D": 4, "E": 3, "F": 3, "G": 2, "H": 1}


def training_corpus() -> Corpus:
    clips = [
        Clip(f"{s}-{k}", Path(f"/nonexistent/{s}-{k}.wav"), 3.0, s, "default", "train")
        for s, n in CLIPS_PER_SYSTEM.items()
        for k in range(1, n + 1)
    ]
    return Corpus(clips, ["default"])


def moved(corpus: Corpus, split: str) -> list[str]:
    return sorted(c.sample_id for c in corpus.split(split))


def clips_of(systems: list[str]) -> list[str]:
    return sorted(f"{s}-{k}" for s in systems for k in range(1, CLIPS_PER_SYSTEM[s] + 1))


# A share of 0.25 takes two clips of A and two of the eight systems, so more of each seeded
# permutation is pinned than by the default shares (whose draws are prefixes of the same ones).
@pytest.mark.parametrize(
    ("seed", "valid_systems", "test_systems"), [(0, ["F", "G"], ["D", "F"]), (42, ["D", "E"], ["A", "B"])]
)
def test_carving_by_system_draws_the_same_systems(seed, valid_systems, test_systems):
    # Must not change: a run carved by system (data.split_by=system) reports on the systems its
    # seed drew; a rerun or a later version with the same seed must hold out the same systems.
    # To change deliberately: regenerate the lists, note it in docs/testing.md and the release notes.
    corpus = training_corpus()
    assert moved(carve_valid(corpus, 0.25, seed, by="system"), "valid") == clips_of(valid_systems)
    assert moved(carve_test(corpus, 0.25, seed, by="system"), "test") == clips_of(test_systems)


@pytest.mark.parametrize(
    ("seed", "expected"),
    [
        (0, ["A-1", "A-6", "B-5", "C-1", "D-1", "E-2", "F-1", "G-2"]),
        (42, ["A-2", "A-6", "B-1", "C-1", "D-3", "E-1", "F-3", "G-2"]),
    ],
)
def test_carving_test_clips_by_clip_draws_the_same_clips(seed, expected):
    # Must not change: test metrics of runs on a table without a test split are comparable across
    # versions only on the same test clips (test_split.csv records them; the seed must redraw them).
    # To change deliberately: regenerate the lists, note it in docs/testing.md and the release notes.
    assert moved(carve_test(training_corpus(), 0.25, seed, by="clip"), "test") == expected


@pytest.mark.parametrize(
    ("seed", "by", "test", "valid"),
    [
        (
            0,
            "clip",
            ["A-1", "B-5", "C-1", "D-1", "E-2", "F-1", "G-2"],
            ["A-4", "B-1", "C-4", "D-4", "E-3", "F-3"],
        ),
        (
            42,
            "clip",
            ["A-2", "B-1", "C-1", "D-3", "E-1", "F-3", "G-2"],
            ["A-5", "B-3", "C-2", "D-1", "E-2", "F-1"],
        ),
        (0, "system", clips_of(["D", "F"]), clips_of(["E"])),
        (42, "system", clips_of(["A", "B"]), clips_of(["E"])),
    ],
)
def test_a_default_run_carves_the_same_test_then_validation_clips(seed, by, test, valid):
    # The data module's order and default shares (MOSDataModule: test_share 0.2 first, then
    # valid_share 0.1 of the clips left), on a corpus with neither split.
    # Must not change: a default run on a user's table trains, selects and reports on these clips;
    # runs of two versions with one seed are compared on them.
    # To change deliberately: regenerate the lists, note it in docs/testing.md and the release notes.
    with_test = carve_test(training_corpus(), 0.2, seed, by)
    both = carve_valid(with_test, 0.1, seed, by)
    assert moved(both, "test") == test
    assert moved(both, "valid") == valid


# Two test sets of 12 and 10 clips, each over 8 systems: every interval exists at both levels.
TRUE = [1.2, 2.0, 3.4, 4.6, 2.8, 3.0, 4.2, 1.8, 3.6, 2.4, 4.0, 3.2]
TRUE += [2.2, 4.4, 1.4, 3.8, 2.6, 3.0, 4.8, 1.6, 3.4, 2.0]
PRED_A = [2.1, 2.6, 2.7, 3.8, 3.4, 2.5, 3.2, 2.9, 3.0, 3.1, 3.6, 2.4]
PRED_A += [3.0, 3.5, 2.6, 2.8, 3.3, 2.4, 3.9, 2.7, 2.6, 3.2]
PRED_B = [1.6, 2.4, 3.0, 4.1, 3.1, 2.8, 3.7, 2.4, 3.2, 2.7, 3.8, 2.9]
PRED_B += [2.6, 3.9, 2.0, 3.2, 2.9, 2.7, 4.3, 2.1, 3.0, 2.6]
SYSTEMS = [f"s{i % 8 + 1}" for i in range(12)] + [f"s{i % 8 + 1}" for i in range(10)]
SETS = ["set1"] * 12 + ["set2"] * 10


def test_bootstrap_resamples_are_the_same_draws_of_the_seed(monkeypatch):
    # Must not change: metrics.json's intervals (train.py, eval.py, sqa-baseline; seed and resamples
    # recorded in run_info.json and the export) are recomputed and compared across versions; the
    # same seed must draw the same resamples: per set (sorted by name), clips then systems.
    # To change deliberately: regenerate the rows and sums, note it in docs/testing.md and the
    # release notes (every interval of earlier runs then differs).
    assert bootstrap_indices(np.random.default_rng(0), 6, 3).tolist() == [
        [5, 3, 3, 1, 1, 0],
        [0, 0, 1, 4, 3, 5],
        [3, 3, 5, 4, 3, 3],
    ]
    # The draws inside evaluate_sets, recorded where sqa.metrics takes them (should it stop calling
    # its `bootstrap_indices`, record them where it draws now: `drawn` stays empty and this fails).
    drawn = []

    def recorded(rng, n, resamples):
        drawn.append(bootstrap_indices(rng, n, resamples))
        return drawn[-1]

    monkeypatch.setattr(metrics, "bootstrap_indices", recorded)
    metrics.evaluate_sets(PRED_A, TRUE, SYSTEMS, SETS, bootstrap=1000, seed=0)
    # (shape, first two resamples, sum of all indices) of set1 utt, set1 sys, set2 utt, set2 sys.
    assert [(d.shape, d[:2].tolist(), int(d.sum())) for d in drawn] == [
        ((1000, 12), [[10, 7, 6, 3, 3, 0, 0, 0, 2, 9, 7, 10], [6, 7, 11, 8, 7, 6, 6, 11, 3, 9, 8, 0]], 66061),
        ((1000, 8), [[2, 5, 7, 6, 4, 0, 7, 1], [1, 7, 6, 7, 5, 2, 7, 4]], 27862),
        ((1000, 10), [[2, 5, 4, 9, 4, 7, 4, 8, 8, 5], [3, 6, 5, 6, 3, 2, 3, 6, 8, 9]], 44917),
        ((1000, 8), [[1, 1, 4, 2, 1, 6, 3, 5], [4, 1, 0, 5, 7, 6, 3, 3]], 27787),
    ]


def test_bootstrap_intervals_are_the_same_bounds_for_the_seed():
    # Must not change: these are the [lo, hi] that metrics.json reports for 1,000 resamples of
    # seed 0 (train.yaml's defaults); users compare them across versions and with published runs.
    # To change deliberately: regenerate the bounds, note it in docs/testing.md and the release notes.
    result = metrics.evaluate_sets(PRED_A, TRUE, SYSTEMS, SETS, bootstrap=1000, seed=0)
    expected = {
        ("set1", "utt"): {
            "rmse": [0.6343795433977562, 0.8573578297714066],
            "lcc": [0.20832497421654195, 0.8886332496249782],
            "srcc": [0.04560026023395545, 0.9354896313364055],
        },
        ("set1", "sys"): {
            "rmse": [0.5389361020085799, 0.9012404499649749],
            "lcc": [0.002060113039281503, 0.942858050323843],
            "srcc": [-0.31645569620253167, 0.8987341772151899],
        },
        ("set2", "utt"): {
            "rmse": [0.8160882305241266, 1.05689403184377],
            "lcc": [-0.37781050941298755, 0.8619847679001514],
            "srcc": [-0.3727180527383367, 0.9496933962264151],
        },
        ("set2", "sys"): {
            "rmse": [0.5716819246689788, 0.9983110546470733],
            "lcc": [-0.15949025636132327, 0.9666006762342566],
            "srcc": [-0.2310126582278481, 1.0],
        },
        ("avg", "utt"): {
            "rmse": [0.7528082057502081, 0.9166571255285699],
            "lcc": [0.08945466542169248, 0.8125033629731376],
            "srcc": [0.041511315656472814, 0.8539358028335301],
        },
        ("avg", "sys"): {
            "rmse": [0.6134877542273046, 0.9048668386517735],
            "lcc": [0.11284361636500231, 0.824338247286368],
            "srcc": [-0.04302580331061344, 0.8230664712546336],
        },
    }
    for (name, level), bounds in expected.items():
        for metric, ci in bounds.items():
            assert result[name]["ci"][level][metric] == pytest.approx(ci, abs=1e-9), (name, level, metric)


def test_paired_bootstrap_of_sqa_compare_gives_the_same_intervals_and_p():
    # Must not change: sqa-compare's B - A interval and p (its output records --seed and
    # --resamples) decide whether a change between versions is called significant; the same seed
    # must redraw the same paired resamples.
    # To change deliberately: regenerate the values, note it in docs/testing.md and the release notes.
    result = compare(PRED_A, PRED_B, TRUE, SYSTEMS, SETS, metric="srcc", resamples=1000, seed=0)
    expected = {
        ("set1", "utt"): ([0.04300691244239628, 0.7895963618998115], 0.018, 9),
        ("set1", "sys"): ([0.07692307692307687, 1.2152155319876838], 0.02, 10),
        ("set2", "utt"): ([0.04715748255076023, 1.2939830815059448], 0.02, 10),
        ("set2", "sys"): ([0.0, 0.8469178082191775], 0.3, 150),
        ("avg", "utt"): ([0.13222902040949297, 0.8957730481297436], 0.0, 0),
        ("avg", "sys"): ([0.11298033920967043, 0.8012778231213071], 0.008, 4),
    }
    for (name, level), (ci, p, ties) in expected.items():
        entry = result[name][level]
        assert entry["ci"] == pytest.approx(ci, abs=1e-9), (name, level)
        assert (entry["p"], entry["ties"], entry["resamples"]) == (pytest.approx(p, abs=1e-9), ties, 1000)


# Per annotation batch, each system's (clip count, MOS of its first clip <system>-utt0001), in
# system order (sys0001-sys0012, sys0013-sys0024, sys0025-sys0034, sys0035-sys0042, sys0043-sys0050).
SYNTHETIC_LAYOUT = {
    "singmospro-p1": [(18, 4.4), (12, 1.0), (12, 2.6), (12, 1.8), (9, 3.4), (19, 1.0),
                      (15, 2.8), (18, 1.2), (12, 3.8), (12, 2.8), (10, 1.0), (16, 2.4)],
    "singmospro-p2": [(14, 4.6), (10, 1.8), (14, 2.0), (14, 2.4), (11, 4.0), (9, 3.2),
                      (16, 3.6), (11, 1.0), (18, 1.4), (13, 1.4), (10, 2.8), (16, 2.6)],
    "singmospro-p3": [(15, 4.2), (18, 2.4), (13, 2.6), (8, 1.4), (14, 2.2), (19, 2.8),
                      (17, 4.0), (16, 4.6), (10, 2.2), (19, 2.4)],
    "singmospro-p4": [(16, 4.2), (17, 4.2), (13, 3.2), (18, 2.4), (15, 1.8), (11, 1.8), (14, 3.4), (11, 3.0)],
    "singmospro-p5": [(20, 4.8), (18, 2.6), (18, 3.0), (9, 3.4), (17, 1.6), (10, 3.6), (11, 2.8), (14, 4.2)],
}  # fmt: skip


def test_the_synthetic_corpus_of_seed_0_is_the_same_corpus(synthetic_root):
    # Must not change: the default corpus (data=synthetic, seed 0, format 5) is the one every
    # example run, test and documented figure uses; runs record its fingerprint (run_info.json,
    # the model card), and a run of a later version is comparable only on the same clips and labels.
    # To change deliberately: raise synthetic.FORMAT_VERSION, regenerate these values, note it in
    # docs/testing.md and the release notes. A new numpy, soxr or libsndfile may change the audio
    # fingerprint alone (the labels' stays): say so there too.
    corpus = load_synthetic(synthetic_root, seed=0)
    systems: dict[str, list[Clip]] = {}
    for c in sorted(corpus.clips, key=lambda c: c.sample_id):
        systems.setdefault(c.system_id, []).append(c)
    layout: dict[str, list[tuple[int, float]]] = {batch: [] for batch in BATCHES}
    for system, clips in sorted(systems.items()):
        assert clips[0].sample_id == f"{system}-utt0001"
        layout[clips[0].domain].append((len(clips), clips[0].mos))
    assert layout == SYNTHETIC_LAYOUT
    # The degradation recipes drawn for the first batch's systems (sys0001-sys0012).
    sys_info = json.loads((synthetic_root / "info" / "sys_info.json").read_text(encoding="utf-8"))
    assert [sys_info[f"sys{i:04d}"]["model"] for i in range(1, 13)] == [
        "clean-0", "lowpass-1200", "detune-25", "bits-6", "noise-35", "bits-4",
        "bits-8", "noise-8", "noise-25", "lowpass-3500", "noise-3", "noise-15",
    ]  # fmt: skip
    assert Counter(c.split for c in corpus.clips) == {"train": 451, "valid": 110, "test": 141}
    assert Counter(c.test_set for c in corpus.split("test")) == {"test1": 51, "test2": 46, "test3": 44}
    # Labels alone (every clip's MOS, split, test set, lyrics/melody MOS and judges' ratings):
    # `Corpus.fingerprint` leaves out the audio of clips whose file does not exist.
    gone = Path("/nonexistent")
    labels = Corpus([replace(c, path=gone) for c in corpus.clips], corpus.domains, corpus.score_range)
    assert labels.fingerprint() == "a2a3f2244d4bb4ac2fe31d66951f0afb4c43e48cb24b93666b436ceab60ad704"
    # Labels and audio bytes: what runs record as `corpus_fingerprint`.
    assert corpus.fingerprint() == "3be1e1b691ea010c121da394ff700129593c711444f81bda7a375fdb9b3d9817"
