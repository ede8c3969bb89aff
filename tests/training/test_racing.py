"""The stop rules: a race against the best finished candidate, and fine-tuning's patience in steps."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from sqa.training.racing import FineTunePatience, Race, Standing, behind, scored, standing

LABELS = np.linspace(1.0, 5.0, 24)


def rows(noise: float, seed: int = 0) -> dict[str, list[dict]]:
    """Validation rows of one set: the labels plus Gaussian noise of `noise` points."""
    rng = np.random.default_rng(seed)
    pred = LABELS + rng.normal(0, noise, LABELS.size)
    return {
        "valid": [
            {"mos": m, "pred": p, "system_id": f"s{i % 6}"}
            for i, (m, p) in enumerate(zip(LABELS, pred, strict=True))
        ]
    }


def check(callback, step: int, **state) -> SimpleNamespace:
    """Call `callback` at a validation check of step `step`; the fake trainer it judged."""
    trainer = SimpleNamespace(
        global_step=step,
        max_steps=state.pop("max_steps", -1),
        should_stop=False,
        sanity_checking=False,
        callback_metrics={},
    )
    trainer.callback_metrics.update(state.pop("metrics", {}))
    callback.on_validation_end(trainer, SimpleNamespace(**state))
    return trainer


@pytest.mark.parametrize(
    ("candidate", "leader", "mode", "expected"),
    [
        ((0.5, 0.7), (0.71, 0.9), "max", True),  # wholly below the leader's interval
        ((0.5, 0.71), (0.71, 0.9), "max", False),  # touching: not beyond both
        ((0.5, 0.72), (0.71, 0.9), "max", False),  # overlapping
        ((1.2, 1.5), (0.8, 1.19), "min", True),  # an error wholly above the leader's
        ((1.19, 1.5), (0.8, 1.19), "min", False),
        ((0.95, 1.5), (0.8, 1.19), "min", False),
    ],
)
def test_a_candidate_is_behind_only_when_the_intervals_do_not_meet(candidate, leader, mode, expected):
    assert behind(Standing(0.0, candidate), Standing(0.0, leader), mode) is expected


def test_without_an_interval_nothing_is_proven_and_nothing_is_behind():
    assert not behind(Standing(9.0, None), Standing(0.1, (0.0, 0.2)), "min")
    assert not behind(Standing(9.0, (8.0, 10.0)), Standing(0.1, None), "min")


def test_a_standing_is_the_rmse_of_the_rows_with_the_bootstrap_interval_of_its_metric():
    data = rows(0.4)
    scored_ = standing(scored(data, 500, 0), "rmse", "utt")
    pred = np.array([r["pred"] for r in data["valid"]])
    assert scored_.value == pytest.approx(float(np.sqrt(np.mean((pred - LABELS) ** 2))))
    lo, hi = scored_.interval
    assert lo < scored_.value < hi
    srcc = standing(scored(data, 500, 0), "srcc", "utt")
    assert srcc.value == pytest.approx(stats.spearmanr(pred, LABELS).statistic)


def leader_of(noise: float) -> Standing:
    return standing(scored(rows(noise), 1000, 0), "rmse", "utt")


def test_a_hopeless_candidate_stops_at_its_first_round_and_says_why():
    race = Race(leader_of(0.2), "leader", "rmse", "utt", "min", start_step=0, bootstrap=1000)
    trainer = check(race, 25, valid_rows=rows(2.0))
    assert trainer.should_stop
    assert race.stopped["step"] == 25
    assert race.stopped["why"].startswith("behind leader beyond both intervals: validation utt rmse")


def test_a_late_starter_behind_within_the_intervals_runs_on_and_its_best_is_kept():
    race = Race(leader_of(0.5), "leader", "rmse", "utt", "min", start_step=0, bootstrap=1000)
    # Worse than the leader at its first check, but within both intervals.
    first = check(race, 25, valid_rows=rows(0.7, seed=1))
    assert not first.should_stop and race.stopped is None
    assert race.best.value > race.leader.value
    later = check(race, 50, valid_rows=rows(0.1, seed=2))
    assert not later.should_stop and race.best.value < race.leader.value
    # A worse check after it does not replace the best so far.
    best = race.best
    check(race, 75, valid_rows=rows(0.6, seed=3))
    assert race.best == best


def test_the_race_judges_from_its_start_step_only():
    race = Race(leader_of(0.2), "leader", "rmse", "utt", "min", start_step=400, bootstrap=1000)
    assert not check(race, 375, valid_rows=rows(2.0)).should_stop
    assert check(race, 400, valid_rows=rows(2.0)).should_stop


def test_a_race_resumed_after_its_stop_ends_at_once():
    race = Race(leader_of(0.2), "leader", "rmse", "utt", "min", bootstrap=1000)
    check(race, 25, valid_rows=rows(2.0))
    again = Race(leader_of(0.2), "leader", "rmse", "utt", "min", bootstrap=1000)
    again.load_state_dict(race.state_dict())
    assert again.best == race.best and again.stopped == race.stopped
    trainer = SimpleNamespace(should_stop=False)
    again.on_train_start(trainer, None)
    assert trainer.should_stop


def selection(score: float, tiebreak: float = 1.0) -> dict:
    return {"metrics": {"val/selection": score, "val/selection_tiebreak": tiebreak}}


def test_finetuning_stops_after_patience_steps_without_a_better_check_and_not_one_check_earlier():
    rule = FineTunePatience(freeze_steps=400, patience_steps=50, mode="max")
    for step, score in ((25, 0.5), (400, 0.8)):
        assert not check(rule, step, **selection(score)).should_stop
    assert not check(rule, 425, **selection(0.7)).should_stop
    trainer = check(rule, 450, **selection(0.7))
    assert trainer.should_stop and rule.stopped["step"] == 450
    assert "the best check is step 400's" in rule.stopped["why"]


def test_an_improvement_while_finetuning_restarts_the_patience():
    rule = FineTunePatience(freeze_steps=400, patience_steps=50, mode="min")
    check(rule, 400, **selection(1.0))
    check(rule, 425, **selection(0.9))  # better: patience counts from here
    assert not check(rule, 450, **selection(0.95)).should_stop
    assert check(rule, 475, **selection(0.95)).should_stop


def test_a_tie_with_a_lower_rmse_is_an_improvement_and_one_without_is_not():
    rule = FineTunePatience(freeze_steps=0, patience_steps=50, mode="max", tolerance=1e-3)
    check(rule, 25, **selection(0.8, tiebreak=1.0))
    # A little lower, within the tolerance, with a lower RMSE: the checkpoint selection takes it.
    check(rule, 50, **selection(0.7995, tiebreak=0.9))
    assert rule.improved_at == 50
    # A little higher than the first, still tied with the best, with a higher RMSE: not taken.
    check(rule, 75, **selection(0.8004, tiebreak=0.95))
    assert rule.improved_at == 50
    assert check(rule, 100, **selection(0.8)).should_stop


def test_the_frozen_steps_never_count_against_the_patience():
    rule = FineTunePatience(freeze_steps=400, patience_steps=50, mode="max")
    check(rule, 25, **selection(0.9))
    for step in range(50, 450, 25):
        assert not check(rule, step, **selection(0.1)).should_stop
    assert check(rule, 450, **selection(0.1)).should_stop


def test_patience_must_be_a_number_of_steps_above_zero():
    with pytest.raises(ValueError, match="patience_steps must be a number of steps above 0"):
        FineTunePatience(400, 0, "max")
    assert math.isnan(FineTunePatience(400, 10, "max").best)


def prepared_for(freeze: int, max_steps: int) -> SimpleNamespace:
    """What `candidates.race` reads of a prepared candidate: its rule, settings and step counts."""
    from omegaconf import OmegaConf

    from sqa.training.selection import SelectionRule

    cfg = OmegaConf.create(
        {"finetune": {"freeze_backbone_steps": freeze}, "trainer": {"max_steps": max_steps}}
    )
    rule = SelectionRule("rmse", "utt", ("valid",), "utt rmse")
    return SimpleNamespace(
        cfg=cfg, module=SimpleNamespace(selection=rule), settings=SimpleNamespace(bootstrap=50, seed=3)
    )


@pytest.mark.parametrize(
    ("freeze", "max_steps", "start"),
    [(400, 500, 400), (300, 300, 0), (0, 500, 0), (400, -1, 400), (500, 400, 0)],
)
def test_a_candidate_that_finetunes_is_raced_from_the_end_of_its_frozen_steps(freeze, max_steps, start):
    from sqa.training.candidates import Tried, race

    leader = Tried("lead", None, None, None, Standing(0.5, (0.4, 0.6)))
    made = race(
        [leader, Tried("worse", None, None, None, Standing(0.9, (0.8, 1.0)))], prepared_for(freeze, max_steps)
    )
    assert made.start_step == start
    # Against the best finished candidate, on the run's comparison, with the run's intervals.
    assert (made.name, made.leader, made.mode, made.metric, made.level) == (
        "lead",
        leader.standing,
        "min",
        "rmse",
        "utt",
    )
    assert (made.bootstrap, made.seed) == (50, 3)


def test_the_first_candidate_races_nobody():
    from sqa.training.candidates import race

    assert race([], prepared_for(0, 100)) is None


@pytest.mark.parametrize(("freeze", "patience", "rules"), [(400, 50, 1), (0, 50, 0), (400, None, 0)])
def test_patience_applies_only_to_a_run_that_unfreezes_and_sets_it(freeze, patience, rules):
    from omegaconf import OmegaConf

    from sqa.training.fitting import stop_rules

    cfg = OmegaConf.create({"finetune": {"freeze_backbone_steps": freeze, "patience_steps": patience}})
    made = stop_rules(cfg, "max", None)
    assert [type(r) for r in made] == [FineTunePatience] * rules
    if rules:
        assert (made[0].freeze_steps, made[0].patience_steps, made[0].mode) == (freeze, patience, "max")
    race = Race(Standing(0.5, (0.4, 0.6)), "lead", "srcc", "sys", "max")
    assert stop_rules(cfg, "max", race)[0] is race


def test_a_rule_records_no_stop_at_the_step_where_training_ends_anyway():
    rule = FineTunePatience(freeze_steps=400, patience_steps=50, mode="max")
    check(rule, 400, **selection(0.8))
    assert not check(rule, 450, max_steps=450, **selection(0.7)).should_stop and rule.stopped is None
    assert check(rule, 450, max_steps=500, **selection(0.7)).should_stop
    race = Race(leader_of(0.2), "leader", "rmse", "utt", "min", bootstrap=1000)
    assert not check(race, 25, max_steps=25, valid_rows=rows(2.0)).should_stop and race.stopped is None
    assert check(race, 25, max_steps=50, valid_rows=rows(2.0)).should_stop


@pytest.mark.parametrize("patience", [0, -5, "abc", 2.5, True])
def test_a_patience_that_is_no_number_of_steps_is_refused_whether_or_not_the_run_unfreezes(patience):
    from omegaconf import OmegaConf

    from sqa.training.fitting import stop_rules

    for freeze in (0, 400):
        cfg = OmegaConf.create({"finetune": {"freeze_backbone_steps": freeze, "patience_steps": patience}})
        with pytest.raises(
            ValueError, match="finetune.patience_steps must be a number of steps above 0, or null"
        ):
            stop_rules(cfg, "max", None)
