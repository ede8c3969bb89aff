"""Scale shift: flagged test sets on both sides of each threshold, the fitted line, and eval.py's map."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from sqa.data.corpus import CorpusError
from sqa.reports import plots, scale
from sqa.training.evaluation import evaluate
from tests.training.test_eval import compose_eval, read_rows


def test_fit_line_is_the_least_squares_line():
    assert scale.fit_line([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx((0.0, 2.0))
    x, y = [1.0, 2.0, 4.0, 7.0], [10.0, 30.0, 40.0, 90.0]
    fit = stats.linregress(x, y)
    assert scale.fit_line(x, y) == pytest.approx((fit.intercept, fit.slope))
    assert scale.fit_line([3.0, 3.0], [1.0, 5.0]) is None
    assert scale.fit_line([3.0], [1.0]) is None


def labels(mean: float, sd: float) -> list[float]:
    """Two labels with exactly this mean and (population) SD."""
    return [mean - sd, mean + sd]


@pytest.mark.parametrize(
    ("mean", "sd", "shifted"),
    [
        # The mean at 1 training SD is shifted, just under it is not, on either side.
        (4.0, 1.0, True),
        (3.99, 1.0, False),
        (2.0, 1.0, True),
        (2.01, 1.0, False),
        # The spread ratio: 2 and 1/2 are inside, just past them is not.
        (3.0, 2.0, False),
        (3.0, 2.01, True),
        (3.0, 0.5, False),
        (3.0, 0.49, True),
    ],
)
def test_a_set_is_shifted_from_one_training_sd_or_twice_the_spread(mean, sd, shifted):
    out = scale.label_shift(3.0, 1.0, {"t": labels(mean, sd)})["t"]
    assert out["shifted"] is shifted
    assert out["shift_sds"] == pytest.approx(mean - 3.0)
    assert out["spread_ratio"] == pytest.approx(sd)
    assert out["clips"] == 2


def test_a_constant_training_set_or_a_single_label_gives_no_ratio():
    out = scale.label_shift(3.0, 0.0, {"t": [1.0, 2.0]})["t"]
    assert out["shift_sds"] is None and out["spread_ratio"] is None and out["shifted"] is False
    assert scale.label_shift(3.0, 1.0, {"t": [3.2]})["t"]["spread_ratio"] is None


@pytest.fixture(scope="module")
def rescaled_manifest(tiny_run, tmp_path_factory):
    """The tiny run's corpus rated 0-100 (labels × 20): a test set far from its 1-5 training labels."""
    manifest, _ = tiny_run
    lines = manifest.read_text(encoding="utf-8").splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        cells[0] = str(manifest.parent / cells[0])
        cells[1] = f"{20 * float(cells[1]):g}"
        out.append(",".join(cells))
    path = tmp_path_factory.mktemp("rescaled") / "manifest.csv"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def test_eval_names_a_shifted_corpus_and_maps_it_on_held_out_clips(
    tiny_run, rescaled_manifest, tmp_path, caplog, monkeypatch
):
    _, run_dir = tiny_run
    drawn = []
    scatter = plots.scatter
    monkeypatch.setattr(plots, "scatter", lambda *a, **k: drawn.append(tuple(a[3])) or scatter(*a, **k))
    corpus = ["data=csv", f"data.corpus.path={rescaled_manifest}", "data.corpus.score_range=[0,100]"]
    plain = tmp_path / "plain"
    evaluate(compose_eval([f"export={run_dir / 'export'}", *corpus]), plain)
    info = json.loads((plain / "eval_info.json").read_text(encoding="utf-8"))
    trained = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))["scale_shift"]
    assert info["scale_shift"]["train_mean"] == trained["train_mean"]
    assert info["scale_shift"]["sets"]["test"]["shifted"] is True
    assert "sit far from the training labels" in caplog.text
    assert not (plain / "mapped").exists()
    # Drawn on the evaluated corpus's 0-100 scale, not the export's 1-5 (eval.py has no training
    # history, so its plots take another path than a training run's).
    assert drawn and set(drawn) == {(0.0, 100.0)}
    all_rows = read_rows(plain / "predictions.csv")

    out = tmp_path / "mapped-run"
    evaluate(compose_eval([f"export={run_dir / 'export'}", *corpus, "map_clips=4"]), out)
    record = json.loads((out / "eval_info.json").read_text(encoding="utf-8"))["scale_map"]
    held = set(record["sample_ids"])
    assert len(held) == 4
    unmapped, mapped = read_rows(out / "predictions.csv"), read_rows(out / "mapped" / "predictions.csv")
    # The map's clips are in neither evaluation; the other clips are in both.
    assert {r["sample_id"] for r in unmapped} == {r["sample_id"] for r in all_rows} - held
    assert [r["sample_id"] for r in mapped] == [r["sample_id"] for r in unmapped]
    fit = [r for r in all_rows if r["sample_id"] in held]
    a, b = np.polyfit([float(r["pred"]) for r in fit], [float(r["mos"]) for r in fit], 1)[::-1]
    assert (record["a"], record["b"]) == pytest.approx((a, b))
    for u, m in zip(unmapped, mapped, strict=True):
        assert float(m["pred"]) == pytest.approx(a + b * float(u["pred"]), abs=1e-3)
    plain_metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["avg"]["utt"]
    mapped_metrics = json.loads((out / "mapped" / "metrics.json").read_text(encoding="utf-8"))["avg"]["utt"]
    # The mapped errors are those of the mapped scores; a line with b > 0 leaves correlations as they are.
    pred = np.array([a + b * float(u["pred"]) for u in unmapped])
    true = np.array([float(u["mos"]) for u in unmapped])
    assert mapped_metrics["rmse"] == pytest.approx(np.sqrt(np.mean((pred - true) ** 2)), rel=1e-4)
    assert plain_metrics["rmse"] == pytest.approx(
        np.sqrt(np.mean((np.array([float(u["pred"]) for u in unmapped]) - true) ** 2)), rel=1e-4
    )
    assert b > 0
    assert mapped_metrics["srcc"] == pytest.approx(plain_metrics["srcc"])


@pytest.mark.parametrize("clips", [1, 8])
def test_a_map_needs_two_clips_to_fit_and_two_to_test(tiny_run, clips, tmp_path):
    manifest, run_dir = tiny_run
    # The tiny corpus has 9 test clips: 1 is too few to fit, 8 leave one to test on.
    cfg = compose_eval([f"export={run_dir / 'export'}", f"map_clips={clips}"])
    with pytest.raises(CorpusError, match=f"map_clips={clips}: needs at least 2 clips"):
        evaluate(cfg, tmp_path)
