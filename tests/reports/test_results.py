import csv
import json
import math

import numpy as np
import pytest

from sqa import metrics
from sqa.core import artefacts
from sqa.core.atomic import atomic_write_json
from sqa.reports import results


def write_run(path, shift):
    pred = [1.0 + shift, 2.0, 3.5, 1.0, 2.5 + shift, 3.0, 2.0, 4.0, 1.0 + shift]
    true = [1.0, 2.0, 3.0, 1.5, 2.0, 3.5, 2.5, 3.0, 1.5]
    sets = ["test1"] * 3 + ["test2"] * 3 + ["test3"] * 3
    block = metrics.evaluate_sets(pred, true, ["a", "b", "c"] * 3, sets)
    path.mkdir(parents=True)
    (path / "metrics.json").write_text(json.dumps(block))
    return block


def test_table_reports_mean_and_std_over_seeds(tmp_path, capsys):
    a = write_run(tmp_path / "ssl" / "0", 0.0)
    b = write_run(tmp_path / "ssl" / "1", 0.4)
    out_csv = tmp_path / "t.csv"
    assert results.main(["--cell", f"SSL={tmp_path}/ssl/*", "--csv", str(out_csv)]) == 0
    printed = capsys.readouterr().out
    mean = (a["test1"]["utt"]["rmse"] + b["test1"]["utt"]["rmse"]) / 2
    std = abs(a["test1"]["utt"]["rmse"] - b["test1"]["utt"]["rmse"]) / 2**0.5
    assert f"{mean:.3f}±{std:.3f}/" in printed
    assert printed.splitlines()[2].split()[:2] == ["SSL", "2"]
    rows = out_csv.read_text().splitlines()
    assert rows[0].startswith("setting,runs,UTT RMSE test1/test2|test3|Avg") and rows[1].startswith("SSL,2,")
    avg = (a["avg"]["sys"]["srcc"] + b["avg"]["sys"]["srcc"]) / 2
    assert rows[1].split(",")[-1].split("|")[-1].startswith(f"{avg:.3f}±")


def test_missing_runs_are_an_error(tmp_path, capsys):
    assert results.main(["--cell", f"X={tmp_path}/none/*"]) == 1
    assert "no run directory" in capsys.readouterr().err


def test_undefined_values_are_summarised_over_the_runs_that_define_them(tmp_path, capsys):
    sets = ["test1"] * 3 + ["test2"] * 3 + ["test3"] * 3
    true = [1.0, 2.0, 3.0, 1.5, 2.0, 3.5, 2.5, 3.0, 1.5]
    systems = ["a", "b", "c"] * 3
    runs = []
    for seed, pred in enumerate(
        (
            [1.0, 2.0, 3.5, 1.0, 2.5, 3.0, 2.0, 4.0, 1.0],
            [1.5, 2.0, 3.0, 1.0, 2.0, 3.0, 2.0, 3.5, 1.5],
            # test3 predicted constant: its correlations are undefined (null) in this run.
            [1.0, 2.5, 3.0, 1.0, 2.5, 3.5, 2.0, 2.0, 2.0],
        )
    ):
        block = metrics.evaluate_sets(pred, true, systems, sets)
        (tmp_path / "r" / str(seed)).mkdir(parents=True)
        atomic_write_json(tmp_path / "r" / str(seed) / "metrics.json", block)
        runs.append(block)
    assert json.loads((tmp_path / "r" / "2" / "metrics.json").read_text())["test3"]["sys"]["srcc"] is None
    assert results.main(["--markdown", "--cell", f"X={tmp_path}/r/*"]) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("| X |"))
    sys_srcc = row.split(" | ")[-1]
    values = [r["test3"]["sys"]["srcc"] for r in runs[:2]]
    mean, std = np.mean(values), np.std(values, ddof=1)
    assert f"\\|{mean:.3f}±{std:.3f} (n=2)\\|" in sys_srcc
    assert "nan" not in row


def test_single_run_shows_n_1_not_a_zero_spread(tmp_path, capsys):
    block = write_run(tmp_path / "one" / "0", 0.0)
    assert results.main(["--cell", f"ONE={tmp_path}/one/*"]) == 0
    printed = capsys.readouterr().out
    assert "±" not in printed
    assert f"{block['test1']['utt']['rmse']:.3f} (n=1)/" in printed
    header, rows = results.build_table([("ONE", f"{tmp_path}/one/*")])
    assert rows[0][1] == "1"


def test_a_value_no_run_defines_prints_n_a(tmp_path):
    pred = [1.0, 2.0, 3.0, 2.0, 2.0, 2.0]
    true = [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    block = metrics.evaluate_sets(pred, true, ["a", "b", "c"] * 2, ["test1"] * 3 + ["test2"] * 3)
    (tmp_path / "r" / "0").mkdir(parents=True)
    atomic_write_json(tmp_path / "r" / "0" / "metrics.json", block)
    _, rows = results.build_table([("X", f"{tmp_path}/r/*")])
    utt_srcc = rows[0][2 + results.COLUMNS.index(("utt", "srcc"))]
    assert utt_srcc == "1.000 (n=1)|n/a|1.000 (n=1)"


def test_predictions_round_trip_and_bad_files_name_the_file(tmp_path):
    rows = [
        {"sample_id": "u1", "system_id": "s1", "test_set": "t", "mos": 3.1, "pred": 0.1 + 0.2},
        {"sample_id": "u2", "system_id": "s2", "test_set": "t", "mos": 2.0, "pred": 4.5},
    ]
    rows[0] |= {"mos_lyrics": 4.0, "pred_lyrics": 3.5}
    rows[1] |= {"mos_lyrics": math.nan, "pred_lyrics": 2.5}
    artefacts.write_predictions(tmp_path, rows, ["lyrics"])
    back = artefacts.read_predictions(tmp_path)
    assert back[0] == rows[0]  # full precision: 0.1 + 0.2 is not 0.3
    assert math.isnan(back[1]["mos_lyrics"]) and back[1]["pred_lyrics"] == 2.5
    path = tmp_path / "predictions.csv"
    path.write_text(path.read_text().replace("4.5", "four"))
    with pytest.raises(ValueError, match=r"predictions\.csv:3: could not convert"):
        artefacts.read_predictions(path)
    path.write_text("sample_id,system_id,mos\n")
    with pytest.raises(ValueError, match=r"predictions\.csv: missing column\(s\) test_set, pred"):
        artefacts.read_predictions(path)


def write_clips(run_dir, sample_ids, verdict=None):
    """A predictions.csv of `sample_ids` (test set `test1`), and run_info.json's learning check if given."""
    rows = [
        {"sample_id": s, "system_id": "a", "test_set": "test1", "mos": 3.0, "pred": 3.0} for s in sample_ids
    ]
    artefacts.write_predictions(run_dir, rows)
    if verdict is not None:
        atomic_write_json(run_dir / "run_info.json", {"learning_check": {"verdict": verdict}})


def test_runs_tested_on_other_clips_are_marked_and_named(tmp_path, capsys):
    for seed in range(3):
        write_run(tmp_path / "same" / str(seed), 0.1 * seed)
        write_clips(tmp_path / "same" / str(seed), ["u1", "u2", "u3"])
        write_run(tmp_path / "carved" / str(seed), 0.1 * seed)
        # Seed 2 carved another test split: one clip differs.
        write_clips(tmp_path / "carved" / str(seed), ["u1", "u2", "u3" if seed < 2 else "u4"])
    assert results.main(["--cell", f"S={tmp_path}/same/*", "--cell", f"C={tmp_path}/carved/*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[2:4]] == [["S", "3"], ["C", "3*"]]
    (note,) = [line for line in lines if line.startswith("* ")]
    assert note == (
        f"* C: {tmp_path}/carved/2 tested on other clips than {tmp_path}/carved/0 (each run carved its own "
        "test split): the ± mixes seeds with test sets; pin one split: "
        f"data.test_split_csv={tmp_path}/carved/0/test_split.csv"
    )


def test_a_run_whose_learning_check_failed_is_marked(tmp_path, capsys):
    for seed, verdict in enumerate(["better", "no_better", "uncertain"]):
        write_run(tmp_path / "r" / str(seed), 0.1 * seed)
        write_clips(tmp_path / "r" / str(seed), ["u1", "u2"], verdict)
        write_run(tmp_path / "ok" / str(seed), 0.1 * seed)
        write_clips(tmp_path / "ok" / str(seed), ["u1", "u2"], "uncertain" if seed else "better")
    assert results.main(["--cell", f"R={tmp_path}/r/*", "--cell", f"OK={tmp_path}/ok/*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[2:4]] == [["R", "3!"], ["OK", "3"]]
    assert lines[-1] == (
        f"! R: {tmp_path}/r/1 predicted no better than the constant training mean (run_info.json "
        "learning_check); its numbers are in the mean"
    )


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
@pytest.mark.parametrize("name", ["metrics.json", "predictions.csv", "run_info.json", "link to metrics.json"])
def test_the_csv_never_replaces_a_file_the_table_reads(tmp_path, capsys, name, overwrite):
    # As reported: `sqa-table --cell demo=RUN --csv RUN/metrics.json` replaced the run's metrics.
    run = tmp_path / "run"
    write_run(run, 0.0)
    write_clips(run, ["u1", "u2"], "better")
    target = run / name
    if name.startswith("link"):
        target = tmp_path / "table.csv"
        target.symlink_to(run / "metrics.json")
    read = run / ("metrics.json" if name.startswith("link") else name)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert results.main(["--cell", f"demo={run}", "--csv", str(target), *overwrite]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"sqa-table: --csv {target}: is one of the inputs of this command ({read}); sqa never writes "
        "over an input, even with --overwrite: write the output elsewhere"
    ]
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_the_csv_never_replaces_the_paper_rows_it_reads(tmp_path, capsys):
    write_run(tmp_path / "run", 0.0)
    rows = tmp_path / "rows.json"
    rows.write_text('{"t": []}')
    args = ["--paper", "--paper-rows", f"{rows}:t", "--cell", f"SSL={tmp_path}/run", "--csv", str(rows)]
    assert results.main([*args, "--overwrite"]) == 1
    assert "is one of the inputs" in capsys.readouterr().err and rows.read_text() == '{"t": []}'


def test_an_existing_csv_is_replaced_only_with_overwrite(tmp_path, capsys):
    write_run(tmp_path / "ssl" / "0", 0.0)
    out = tmp_path / "my_results.csv"
    out.write_bytes(b"my own results\r\n")
    args = ["--cell", f"SSL={tmp_path}/ssl/*", "--csv", str(out)]
    assert results.main(args) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and out.read_bytes() == b"my own results\r\n"
    assert captured.err.splitlines() == [
        f"sqa-table: --csv {out}: already exists; pass --overwrite to replace it"
    ]
    assert results.main([*args, "--overwrite"]) == 0
    assert out.read_text().startswith("setting,runs,UTT RMSE")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_results.csv", "ssl"]


def test_the_csv_quotes_a_label_a_spreadsheet_would_run_and_keeps_a_number(tmp_path):
    # A label holds no "=" (LABEL=GLOB), but "+", "-" and "@" start formulas too.
    for name in "abc":
        write_run(tmp_path / name, 0.0)
    out = tmp_path / "t.csv"
    cells = [f"--cell=@SUM(A1:A9)={tmp_path}/a", f"--cell=-1+2={tmp_path}/b", f"--cell=-0.5={tmp_path}/c"]
    assert results.main([*cells, "--csv", str(out)]) == 0
    labels = [row[0] for row in csv.reader(out.open(encoding="utf-8", newline=""))]
    assert labels == ["setting", "'@SUM(A1:A9)", "'-1+2", "-0.5"]
