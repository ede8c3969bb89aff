import json

from sqa import metrics, results


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
    assert "| SSL | 2 |" in printed
    rows = out_csv.read_text().splitlines()
    assert rows[0].startswith("setting,runs,UTT RMSE") and rows[1].startswith("SSL,2,")
    avg = (a["avg"]["sys"]["srcc"] + b["avg"]["sys"]["srcc"]) / 2
    assert rows[1].split(",")[-1].split("|")[-1].startswith(f"{avg:.3f}±")


def test_missing_runs_are_an_error(tmp_path, capsys):
    assert results.main(["--cell", f"X={tmp_path}/none/*"]) == 1
    assert "no run directory" in capsys.readouterr().err
