"""Tables for a terminal, headers naming the test sets, and no Avg of a single set (every table)."""

import numpy as np
import pytest

from sqa import metrics
from sqa.core import artefacts
from sqa.exports import model_card
from sqa.reports import results, tables
from tests.reports.test_results import write_run


def one_set_results(bootstrap=0, sets=None, apart=()):
    """Metrics of 24 clips of 8 systems, all in the set `default` unless `sets` names each clip's."""
    rng = np.random.default_rng(0)
    true = rng.uniform(1, 5, 24)
    systems = [f"s{i % 8}" for i in range(24)]
    sets = sets or ["default"] * 24
    return metrics.evaluate_sets(true + rng.normal(0, 0.5, 24), true, systems, sets, bootstrap, apart=apart)


def test_a_plain_table_pads_each_column_to_its_widest_cell():
    assert (
        tables.plain_table(["a", "bb"], [["ccc", "d"], ["e", "f|g"]]) == "a    bb\n---  ---\nccc  d\ne    f|g"
    )


def test_paper_layout_of_one_two_three_and_four_parts():
    assert tables.paper_layout(["a"]) == "a"
    assert tables.paper_layout(["a", "b"]) == "a|b"
    assert tables.paper_layout(["a", "b", "c"]) == "a|b|c"
    assert tables.paper_layout(["a", "b", "c", "d"]) == "a/b|c|d"


def test_sqa_table_prints_for_a_terminal_with_the_sets_in_its_header(tmp_path, capsys):
    write_run(tmp_path / "ssl" / "0", 0.0)
    write_run(tmp_path / "ssl" / "1", 0.4)
    write_run(tmp_path / "midi" / "0", 0.2)
    cells = ["--cell", f"SSL={tmp_path}/ssl/*", "--cell", f"MIDI={tmp_path}/midi/*"]
    assert results.main(cells) == 0
    lines = capsys.readouterr().out.splitlines()
    header, rows = results.build_table([("SSL", f"{tmp_path}/ssl/*"), ("MIDI", f"{tmp_path}/midi/*")])
    assert lines == tables.plain_table(header, rows).splitlines()
    assert header[2:] == [
        f"{column} test1/test2|test3|Avg"
        for column in ("UTT RMSE", "UTT LCC", "UTT SRCC", "SYS RMSE", "SYS LCC", "SYS SRCC")
    ]
    # No markdown: no escaped pipes, no cell borders; each cell starts under its column's name.
    assert "\\" not in "\n".join(lines) and not lines[2].startswith("|")
    starts = [lines[0].index(name) for name in header]
    for line, row in zip(lines[2:], rows, strict=True):
        assert [line[start:].split("  ")[0] for start in starts] == row
    assert set(lines[1]) == {"-", " "}


def test_markdown_on_request_escapes_the_pipes_of_cells_and_header(tmp_path, capsys):
    write_run(tmp_path / "ssl" / "0", 0.0)
    assert results.main(["--markdown", "--cell", f"SSL={tmp_path}/ssl/*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| setting | runs | UTT RMSE test1/test2\\|test3\\|Avg | ")
    assert lines[1] == "|---|---|---|---|---|---|---|---|"
    assert lines[2].startswith("| SSL | 1 | ") and lines[2].count("\\|") == 12


def test_one_test_set_has_no_avg_in_sqa_table_the_run_table_or_the_model_card(tmp_path, capsys):
    block = one_set_results(bootstrap=20)
    assert tables.table_keys(block) == ["default"]
    (tmp_path / "r" / "0").mkdir(parents=True)
    artefacts.write_metrics(tmp_path / "r" / "0", block)
    assert results.main(["--cell", f"ONE={tmp_path}/r/*"]) == 0
    header, rows = results.build_table([("ONE", f"{tmp_path}/r/*")])
    assert capsys.readouterr().out == tables.plain_table(header, rows) + "\n"
    assert header[2] == "UTT RMSE default"
    # The value once: not `1.046 (n=1)|1.046 (n=1)`.
    assert rows[0][2] == f"{block['default']['utt']['rmse']:.3f} (n=1)"
    run_table = tables.format_table(block)
    assert run_table.splitlines()[0] == "level  metric   default" and "Avg" not in run_table
    assert (
        run_table.splitlines()[1] == f"utt    rmse     {tables.metric_cell(block['default'], 'utt', 'rmse')}"
    )
    card = "\n".join(model_card.metrics_table(block))
    assert "| default | utterance | 24 |" in card and "| average |" not in card
    # The --paper layout's means are over the same keys.
    assert results.paper_means([block], "utt", "rmse") == [pytest.approx(block["default"]["utt"]["rmse"])]


def test_two_sets_keep_the_avg_everywhere():
    block = one_set_results(sets=["t1"] * 12 + ["t2"] * 12)
    assert tables.table_keys(block) == ["t1", "t2", "avg"]
    assert tables.format_table(block).splitlines()[0] == "level  metric   t1|t2|Avg"
    card = "\n".join(model_card.metrics_table(block))
    assert "| t2 | system |" in card and "| average | system |" in card


def test_references_left_out_of_the_average_do_not_make_a_second_set():
    # One headline set beside references: the average is over that set alone and would repeat it.
    alone = one_set_results(sets=["test"] * 18 + ["reference"] * 6, apart=("reference",))
    assert tables.table_keys(alone) == ["reference", "test"]
    assert tables.format_table(alone).splitlines()[0] == "level  metric   reference|test"
    two = one_set_results(sets=["t1"] * 9 + ["t2"] * 9 + ["reference"] * 6, apart=("reference",))
    assert tables.table_keys(two) == ["reference", "t1", "t2", "avg"]
    # A card's metrics without `averaged_over` count every set.
    assert tables.table_keys({"t1": {}, "avg": {}}) == ["t1"]
    assert tables.table_keys({"t1": {}, "t2": {}, "avg": {}}) == ["t1", "t2", "avg"]
    assert tables.table_keys({"t1": {}}) == ["t1"]


def test_cells_with_different_test_sets_are_refused_naming_both(tmp_path, capsys):
    write_run(tmp_path / "three" / "0", 0.0)
    (tmp_path / "one" / "0").mkdir(parents=True)
    artefacts.write_metrics(tmp_path / "one" / "0", one_set_results())
    cells = ["--cell", f"THREE={tmp_path}/three/*", "--cell", f"ONE={tmp_path}/one/*"]
    for mode in ([], ["--paper"]):
        assert results.main([*mode, *cells]) == 1
        err = capsys.readouterr().err
        assert err.startswith("sqa-table: cell 'ONE' has test sets ['default'], cell 'THREE' ")
        assert "make a table per corpus" in err


def test_a_bench_row_is_the_average_over_its_sets_with_references_left_out():
    # Set a ranks its 3 clips right (SRCC 1), set b its 5 clips backwards (SRCC -1): the clip-weighted
    # average is (3 - 5) / 8 = -0.25. Two reference clips, each a system of its own, stay out of it.
    pred = [1, 2, 3, 1, 2, 3, 4, 5, 9, 1]
    true = [1, 2, 3, 5, 4, 3, 2, 1, 1, 9]
    sets = ["a"] * 3 + ["b"] * 5 + ["reference"] * 2
    systems = [f"s{i}" for i in range(10)]
    block = metrics.evaluate_sets(pred, true, systems, sets, apart=metrics.ROLES)
    row = tables.bench_row("c", "p", "zero-shot", block)
    header = ["utt RMSE", "utt LCC", "utt SRCC", "utt KTAU", "sys RMSE", "sys LCC", "sys SRCC", "sys KTAU"]
    cells = dict(zip(header, row[4:], strict=True))
    assert row[:4] == ["c", "p", "zero-shot", "8/8"]
    assert cells["utt SRCC"] == "-0.250" and cells["sys SRCC"] == "-0.250"
    assert cells["utt KTAU"] == "-0.250"
    # A metric the reference set cannot define (2 points) is not explained by it: the sets averaged define it.
    assert tables.bench_reasons(block) == {}


def test_a_bench_n_a_names_the_reason_of_the_sets_averaged_only():
    # The constant's correlations: undefined for one reason in the test set, another in the reference set.
    block = metrics.evaluate_sets(
        [3.0] * 6, [1, 2, 3, 4, 5, 9], list("abcdef"), ["t"] * 4 + ["reference"] * 2
    )
    assert block["reference"]["undefined"]["utt"]["srcc"] == "2 clips (needs at least 3)"
    block = metrics.evaluate_sets(
        [3.0] * 6, [1, 2, 3, 4, 5, 9], list("abcdef"), ["t"] * 4 + ["reference"] * 2, apart=metrics.ROLES
    )
    assert tables.bench_reasons(block)["utt"] == {
        "every clip has the same prediction": ["lcc", "srcc", "ktau"]
    }
    table = tables.bench_table(
        [{"corpus": "c", "predictor": "constant", "kind": "constant", "results": block}]
    )
    assert "n/a: c / constant utt lcc, srcc, ktau: every clip has the same prediction" in table
    assert "needs at least 3" not in table
    assert "constant: the mean of the corpus's own training labels for every clip" in table
    assert "zero-shot:" not in table
