"""sqa-table --paper: the SingMOS-Pro paper's layout and its published rows beside a run's."""

import json

from sqa import metrics, results

from .test_results import write_run


def with_mse(block, pred, true, systems, sets):
    """Add an independently computed MSE to every set's utt/sys block (and the weighted average)."""
    import numpy as np

    pred, true, systems, sets = map(np.asarray, (pred, true, systems, sets))
    for name in set(sets.tolist()):
        rows = sets == name
        block[name]["utt"]["mse"] = float(np.mean((pred[rows] - true[rows]) ** 2))
        keys = sorted(set(systems[rows].tolist()))
        means = [(pred[rows & (systems == k)].mean(), true[rows & (systems == k)].mean()) for k in keys]
        block[name]["sys"]["mse"] = float(np.mean([(p - t) ** 2 for p, t in means]))
    for level in ("utt", "sys"):
        sizes = {name: block[name][level]["n"] for name in block if name != "avg"}
        total = sum(sizes.values())
        block["avg"][level]["mse"] = sum(block[n][level]["mse"] * k for n, k in sizes.items()) / total
    return block


def write_paper_run(path, shift):
    pred = [1.0 + shift, 2.0, 3.5, 1.0, 2.5 + shift, 3.0, 2.0, 4.0, 1.0 + shift]
    true = [1.0, 2.0, 3.0, 1.5, 2.0, 3.5, 2.5, 3.0, 1.5]
    systems = ["a", "b", "c"] * 3
    sets = ["test1"] * 3 + ["test2"] * 3 + ["test3"] * 3
    block = with_mse(metrics.evaluate_sets(pred, true, systems, sets), pred, true, systems, sets)
    path.mkdir(parents=True)
    (path / "metrics.json").write_text(json.dumps(block))
    return block


def test_paper_layout_prints_mse_lcc_srcc_with_two_decimals(tmp_path, capsys):
    a = write_paper_run(tmp_path / "ssl" / "0", 0.0)
    b = write_paper_run(tmp_path / "ssl" / "1", 0.4)
    assert results.main(["--paper", "--cell", f"SSL={tmp_path}/ssl/*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| setting | runs | UTT MSE | UTT LCC | UTT SRCC | SYS MSE | SYS LCC | SYS SRCC |"
    cells = lines[2].split(" | ")
    assert cells[0] == "| SSL" and cells[1] == "2"

    def mean(s, level, name):
        return (a[s][level][name] + b[s][level][name]) / 2

    for column, (level, name) in zip(cells[2:], results.PAPER_COLUMNS, strict=True):
        expected = [f"{mean(s, level, name):.2f}" for s in ("test1", "test2", "test3", "avg")]
        assert column.rstrip(" |") == "{}/{}\\|{}\\|{}".format(*expected)
    # MSE, not RMSE: the paper's column is the squared error.
    assert a["test1"]["utt"]["mse"] != a["test1"]["utt"]["rmse"]


def test_paper_layout_needs_mse_in_metrics(tmp_path, capsys):
    write_run(tmp_path / "old" / "0", 0.0)
    path = tmp_path / "old" / "0" / "metrics.json"
    run = json.loads(path.read_text())
    for block in run.values():
        block["utt"].pop("mse", None)
        block["sys"].pop("mse", None)
    path.write_text(json.dumps(run))
    assert results.main(["--paper", "--cell", f"X={tmp_path}/old/*"]) == 1
    assert "has no 'mse'" in capsys.readouterr().err


def test_paper_rows_are_printed_before_the_runs_with_their_source(tmp_path, capsys):
    from .conftest import REPO

    write_paper_run(tmp_path / "ssl" / "0", 0.0)
    shipped = REPO / "recipes" / "singmos_pro" / "paper_rows.json"
    assert (
        results.main(["--paper", "--cell", f"SSL={tmp_path}/ssl/*", "--paper-rows", f"{shipped}:table3"]) == 0
    )
    out = capsys.readouterr().out
    labels = [line.split(" | ")[0].lstrip("| ") for line in out.splitlines() if line.startswith("| ")]
    assert labels[1:] == [
        "paper: DNSMOS",
        "paper: UTMOS",
        "paper: SingMOS",
        "paper: SHEET-ssqa",
        "paper: SSL",
        "paper: SSL + MIDI pitch",
        "paper: SSL + pitch histogram",
        "SSL",
    ]
    # Values nobody has filled in print as "?", never as numbers.
    assert "?/?\\|?\\|?" in out and "arXiv:2510.01812" in out
    filled = {
        "source": "test values",
        "t": [
            {
                "setting": "X",
                **{lv: {m: [0.1234, 1, 0.5, None] for m in ("mse", "lcc", "srcc")} for lv in ("utt", "sys")},
            }
        ],
    }
    (tmp_path / "rows.json").write_text(json.dumps(filled))
    assert (
        results.main(
            ["--paper", "--cell", f"SSL={tmp_path}/ssl/*", "--paper-rows", f"{tmp_path}/rows.json:t"]
        )
        == 0
    )
    assert "| paper: X | - | 0.12/1.00\\|0.50\\|? |" in capsys.readouterr().out


def test_bad_paper_rows_name_the_file_and_key(tmp_path, capsys):
    write_paper_run(tmp_path / "ssl" / "0", 0.0)
    bad = {"t": [{"setting": "X", "utt": {"mse": [1, 2, 3]}}]}
    (tmp_path / "rows.json").write_text(json.dumps(bad))
    args = ["--paper", "--cell", f"SSL={tmp_path}/ssl/*", "--paper-rows"]
    assert results.main([*args, f"{tmp_path}/rows.json:t"]) == 1
    assert f"{tmp_path}/rows.json: t[0]: utt.mse" in capsys.readouterr().err
    assert results.main([*args, f"{tmp_path}/rows.json:table9"]) == 1
    assert "table9" in capsys.readouterr().err
