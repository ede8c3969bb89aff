"""Rules of docs/guide.md and docs/selection.md that no other test pinned (issue 34, item 4).

Each test pins one documented rule on both sides of its threshold (or both sources of its
precedence), so that the rule's nearest plausible neighbour fails it. The full list of rules
and the tests that pin them is in docs/testing.md.
"""

from __future__ import annotations

import csv
import inspect
import json
import statistics
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from sqa import metrics
from sqa.core.resolvers import default_precision
from sqa.data.corpus import Clip, LabelCounts, count_labels
from sqa.data.readers import read_singmos_pro
from sqa.reports import compare
from sqa.training.run import log_interval
from sqa.training.selection import choose_rule
from tests.conftest import REPO
from tests.data.test_corpus import make_singmos_pro

# docs/selection.md, "Selection rule": the `selection` node as documented.
DOCUMENTED_SELECTION = {
    "metric": "srcc",
    "level": "sys",
    "fallback": "rmse",
    "min_systems": 5,
    "min_distinct_labels": 5,
    "min_clips_per_system": 3,
    "tie_tolerance": 1e-6,
}


def compose_train(overrides: list[str] | None = None, hydra: bool = False):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides or [], return_hydra_config=hydra)


def valid_clip(sample_id: str, system: str, mos: float) -> Clip:
    return Clip(sample_id, Path(f"{sample_id}.wav"), mos, system, "d", "valid")


def test_labels_and_system_means_are_compared_to_9_decimals():
    # selection.md: "compared to 9 decimals". 1e-10 apart is one level, 1e-8 apart two.
    near = count_labels([valid_clip("a", "A", 3.0), valid_clip("b", "B", 3.0 + 1e-10)])
    assert (near.labels, near.system_labels) == (1, 1)
    apart = count_labels([valid_clip("a", "A", 3.0), valid_clip("b", "B", 3.0 + 1e-8)])
    assert (apart.labels, apart.system_labels) == (2, 2)
    # Equal means summed apart: (0.1 + 0.2) / 2 is 0.15000000000000002 in floats, one mean with 0.15.
    summed = count_labels(
        [valid_clip("a1", "A", 0.1), valid_clip("a2", "A", 0.2), valid_clip("b", "B", 0.15)]
    )
    assert (0.1 + 0.2) / 2 != 0.15
    assert (summed.labels, summed.system_labels) == (3, 1)


def selection_defaults_hold(cfg) -> None:
    """The composed `selection` node is the documented one, and its thresholds act at their values."""
    assert OmegaConf.to_container(cfg.selection) == DOCUMENTED_SELECTION
    settings = OmegaConf.to_container(cfg.selection)

    def falls_back(counts: LabelCounts, **changed) -> bool:
        return choose_rule({"v": counts}, **{**settings, **changed}).fallback_used

    # System level: 5 distinct system means and a median of 3 clips rank; 4 means or 2.5 do not.
    assert not falls_back(LabelCounts(15, 5, 5, 5, 3.0))
    assert falls_back(LabelCounts(15, 5, 5, 4, 3.0))
    assert falls_back(LabelCounts(15, 5, 5, 5, 2.5))
    # Utterance level: 5 distinct clip labels rank, 4 do not.
    assert not falls_back(LabelCounts(15, 1, 5, 1, 15.0), level="utt")
    assert falls_back(LabelCounts(15, 1, 4, 1, 15.0), level="utt")
    # Where none can rank, the default fallback: utterance-level RMSE, minimised.
    rule = choose_rule({"v": LabelCounts(8, 2, 2, 2, 4.0)}, **settings)
    assert (rule.metric, rule.level, rule.mode) == ("rmse", "utt", "min")


def test_the_selection_defaults_are_the_documented_ones():
    selection_defaults_hold(compose_train())
    # The function's own defaults (tests and callers without a config) agree with the config's.
    parameters = inspect.signature(choose_rule).parameters
    assert {name: parameters[name].default for name in DOCUMENTED_SELECTION} == DOCUMENTED_SELECTION


def test_the_synthetic_corpus_default_run_selects_on_utterance_rmse(synthetic_root):
    # selection.md: "1-3 validation clips per system (median 2), so its default run selects on
    # the utterance-level RMSE": enough distinct system means, too few clips behind each.
    cfg = compose_train([f"data.corpus.root={synthetic_root}"])
    valid = instantiate(cfg.data.corpus).valid_sets()
    sizes = [n for clips in valid.values() for n in Counter(c.system_id for c in clips).values()]
    assert (min(sizes), statistics.median(sizes), max(sizes)) == (1, 2, 3)
    counts = {name: count_labels(clips) for name, clips in valid.items()}
    assert all(c.system_labels >= 5 and c.clips_per_system < 3 for c in counts.values())
    rule = choose_rule(counts, **cfg.selection)
    assert (rule.metric, rule.level, rule.fallback_used) == ("rmse", "utt", True)
    # The median clips per system is what decides: at a minimum of 2 every set would rank.
    assert choose_rule(counts, **{**cfg.selection, "min_clips_per_system": 2}).metric == "srcc"


def test_the_rule_used_is_printed_before_training(tiny_run):
    # selection.md: "The rule actually used is printed before training (`Selecting checkpoints on ...`)".
    _, run_dir = tiny_run
    log = (run_dir / "train.log").read_text().splitlines()
    (line,) = [i for i, text in enumerate(log) if "Selecting checkpoints on" in text]
    # The fallback actually used, not the system-level SRCC that was asked for.
    assert log[line].endswith("Selecting checkpoints on utterance-level rmse over valid/default (min)")
    info = json.loads((run_dir / "run_info.json").read_text())
    assert log[line].endswith(info["selection"]["rule"])
    warning = next(i for i, text in enumerate(log) if "cannot rank" in text)
    first_check = next(i for i, text in enumerate(log) if "val/selection" in text and "step " in text)
    assert warning < line < first_check


@pytest.mark.parametrize(
    ("cuda", "bf16", "expected"),
    [(True, True, "bf16-mixed"), (True, False, "16-mixed"), (False, True, "32-true")],
)
def test_a_gpu_trains_bf16_mixed_where_supported_and_fp16_mixed_otherwise(monkeypatch, cuda, bf16, expected):
    # guide.md: "On a GPU the trainer runs bf16 mixed precision where the GPU supports it (fp16
    # mixed otherwise)"; on a CPU full precision.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: bf16)
    assert default_precision() == expected
    assert compose_train().trainer.precision == expected


def logging_interval(every: int, batches: int, devices: object = 1, nodes: int = 1) -> int:
    cfg = OmegaConf.create({"trainer": {"log_every_n_steps": every, "devices": devices, "num_nodes": nodes}})
    return log_interval(cfg, SimpleNamespace(train_dataloader=lambda: range(batches)))


def test_the_logging_interval_is_lowered_only_to_an_epoch_shorter_than_it():
    # selection.md: lowered to the training batches per epoch "when epochs are shorter than the interval".
    assert logging_interval(10, 3) == 3
    assert logging_interval(10, 10) == 10
    assert logging_interval(10, 30) == 10
    # Under DDP an epoch is each rank's share of the batches.
    assert logging_interval(10, 12, devices=4) == 3
    assert logging_interval(10, 24, devices=2, nodes=2) == 6
    assert logging_interval(10, 12, devices="auto") == 10


def test_an_interval_needs_8_points_for_a_correlation_and_2_for_an_error():
    # guide.md: `metrics.MIN_INTERVAL_POINTS`: 8 for the correlations and pair_acc, 2 for the errors.
    draws = {level: {m: np.linspace(0.1, 0.9, 101) for m in metrics.METRIC_NAMES} for level in metrics.LEVELS}

    def intervals(n_utt: int, n_sys: int) -> dict:
        block = {
            level: {**dict.fromkeys(metrics.METRIC_NAMES, 0.5), "n": n}
            for level, n in (("utt", n_utt), ("sys", n_sys))
        }
        return metrics.intervals(draws, block)

    correlations = ["lcc", "srcc", "ktau", "pair_acc"]
    eight_seven = intervals(8, 7)
    assert eight_seven["utt"]["srcc"] == pytest.approx([0.12, 0.88])
    assert [m for m in metrics.METRIC_NAMES if eight_seven["utt"][m] is None] == []
    assert [m for m in metrics.METRIC_NAMES if eight_seven["sys"][m] is None] == correlations
    two_one = intervals(2, 1)
    assert [m for m in metrics.METRIC_NAMES if two_one["utt"][m] is None] == correlations
    assert two_one["utt"]["rmse"] == pytest.approx([0.12, 0.88])
    assert [m for m in metrics.METRIC_NAMES if two_one["sys"][m] is None] == list(metrics.METRIC_NAMES)


def test_a_split_json_batch_needs_train_and_may_lack_valid_and_test(tmp_path):
    # selection.md: "In `split.json` a batch needs `train`; `valid` and `test` are optional."
    root = make_singmos_pro(tmp_path)
    split = json.loads((root / "info" / "split.json").read_text())
    del split["singmospro-p2"]["test"], split["singmospro-p2"]["valid"]
    (root / "info" / "split.json").write_text(json.dumps(split))
    corpus = read_singmos_pro(root, ["singmospro-p1", "singmospro-p2"])
    assert {name: sorted(c.sample_id for c in clips) for name, clips in corpus.test_sets().items()} == {
        "test1": ["s1-u3", "s2-u3"]
    }
    assert [c.sample_id for c in corpus.split("valid")] == ["s1-u2"]
    assert "s3-u1" in {c.sample_id for c in corpus.split("train")}


def test_the_documented_run_and_comparison_defaults():
    # guide.md: early_stopping_patience 12, trainer.max_epochs=60, bootstrap 1000, head_init random,
    # finetune.frame_cache_mb 1024 (selection.md); an Optuna sweep's 20 trials, 1 at a time;
    # sqa-compare's --metric srcc, --resamples 1000, --seed 0.
    cfg = compose_train()
    assert (cfg.early_stopping_patience, cfg.trainer.max_epochs, cfg.bootstrap) == (12, 60, 1000)
    assert (cfg.head_init, cfg.finetune.frame_cache_mb) == ("random", 1024)
    sweeper = compose_train(["hparams_search=optuna"], hydra=True).hydra.sweeper
    assert (sweeper.n_trials, sweeper.n_jobs) == (20, 1)
    args = compare.parse_args(["a.csv", "b.csv"])
    assert (args.metric, args.resamples, args.seed) == ("srcc", 1000, 0)


def test_dnsmos_on_another_scale_without_training_clips_has_no_errors(tmp_path, capsys):
    # guide.md (DNSMOS, other scales): the errors use a line fitted on the training clips; "A
    # corpus without training clips gets no errors (NaN)", while its correlations stay DNSMOS's own.
    from sqa.baselines.cli import main
    from tests.baselines.test_dnsmos import write_corpus, write_rows

    with write_corpus(tmp_path).open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["test_set"] == "setB"]
    for r in rows:
        r["score"] = repr(25.0 * (float(r["score"]) - 1.0))
    wide = write_rows(tmp_path / "wide.csv", rows)
    run_dir = tmp_path / "run"
    argv = ["--corpus", "csv", "--manifest", str(wide), "--score-range", "0", "100", "--bootstrap", "0"]
    assert main([*argv, "--run-dir", str(run_dir)]) == 0
    assert "no training clips to fit DNSMOS's scale map on: errors undefined" in capsys.readouterr().err
    saved = json.loads((run_dir / "metrics.json").read_text())["setB"]
    assert [saved[level][m] for level in ("utt", "sys") for m in ("rmse", "mse")] == [None] * 4
    # The clean clip above the noisy one, as rated: the one pair is ordered right.
    assert saved["utt"]["pair_acc"] == 1.0
    assert json.loads((run_dir / "run_info.json").read_text())["scale_map"] is None


@pytest.mark.parametrize(
    ("split", "as_test", "as_valid"),
    [("train", True, True), ("valid", False, True), ("test", False, False), (None, False, False)],
)
def test_a_reused_split_names_training_clips_for_test_and_training_or_validation_clips_for_valid(
    split, as_test, as_valid, tmp_path
):
    # selection.md, data keys: test_split_csv must name training clips; valid_split_csv training or
    # validation clips. Each split on both lists (None: an ID the corpus does not hold).
    from sqa.data.corpus import Corpus, CorpusError

    clips = [Clip(f"{s}-1", tmp_path / f"{s}.wav", 3.0, "A", "d", s) for s in ("train", "valid", "test")]
    corpus = Corpus(clips, ["d"])
    wanted = f"{split}-1" if split else "absent"
    for move, accepted, kind in (
        (corpus.with_test, as_test, "test"),
        (corpus.with_valid, as_valid, "validation"),
    ):
        if accepted:
            moved = {c.sample_id: c.split for c in move([wanted], "s.csv").clips}
            assert moved[wanted] == ("test" if kind == "test" else "valid")
        else:
            with pytest.raises(CorpusError, match=rf"^s.csv: 1 listed {kind} clip\(s\) are not .*'{wanted}'"):
                move([wanted], "s.csv")
