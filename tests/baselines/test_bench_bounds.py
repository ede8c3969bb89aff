"""sqa-bench recipes within an export's bounds (sqa.exports.bounds), each at its bound and one past it.

And a manifest outside the recipe's folder: named in the error, none of its content quoted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sqa.baselines import bench
from sqa.baselines.bench_config import BenchConfigError, read_config
from sqa.exports.bounds import MAX_ARCH_LIST, MAX_BOOTSTRAP, MAX_CONFIG_BYTES, MAX_INTEGER_DIGITS

CORPUS = "corpora: [{name: c, manifest: m.csv}]\n"
GOOD = CORPUS + "predictors: [distillmos]\n"


def recipe(folder: Path, text: str) -> Path:
    """`text` as bench.yaml in `folder`, beside an (empty) manifest m.csv."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "m.csv").write_text("wav_path,score,system_id\n", encoding="utf-8")
    path = folder / "bench.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def refused(path: Path, capsys) -> str:
    """The one line sqa-bench prints for the recipe at `path`, which it refuses (exit 2) before scoring."""
    with pytest.raises(BenchConfigError) as caught:
        read_config(path, bench.RECIPE_BOUNDS)
    assert bench.main([str(path), "--out", str(path.parent / "out")]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"sqa-bench: {caught.value}"]
    assert not (path.parent / "out").exists()
    return str(caught.value)


def test_the_recipe_bounds_are_the_exports():
    assert bench.RECIPE_BOUNDS.bootstrap == MAX_BOOTSTRAP
    assert bench.RECIPE_BOUNDS.entries == MAX_ARCH_LIST
    assert bench.RECIPE_BOUNDS.file_bytes == MAX_CONFIG_BYTES
    assert bench.RECIPE_BOUNDS.integer_digits == MAX_INTEGER_DIGITS


def test_bootstrap_is_read_up_to_the_exports_bound_and_refused_past_it(tmp_path, capsys):
    at = recipe(tmp_path / "at", GOOD + f"bootstrap: {MAX_BOOTSTRAP}\n")
    assert read_config(at, bench.RECIPE_BOUNDS).bootstrap == MAX_BOOTSTRAP
    for value in (MAX_BOOTSTRAP + 1, 10**8):
        path = recipe(tmp_path / str(value), GOOD + f"bootstrap: {value}\n")
        assert refused(path, capsys) == (
            f"{path}: bootstrap: must be an integer of at most {MAX_BOOTSTRAP}, got {value}"
        )


@pytest.mark.parametrize("key", ["corpora", "predictors"])
def test_a_list_of_the_recipe_holds_at_most_the_exports_list_bound(tmp_path, capsys, key):
    def text(entries: int) -> str:
        if key == "corpora":
            listed = ", ".join(f"{{name: c{i}, manifest: m.csv}}" for i in range(entries))
            return f"corpora: [{listed}]\npredictors: [distillmos]\n"
        listed = ", ".join(f"{{zero_shot: dnsmos, name: p{i}}}" for i in range(entries))
        return f"{CORPUS}predictors: [{listed}]\n"

    config = read_config(recipe(tmp_path / "at", text(MAX_ARCH_LIST)), bench.RECIPE_BOUNDS)
    assert len(getattr(config, key)) == MAX_ARCH_LIST
    path = recipe(tmp_path / "past", text(MAX_ARCH_LIST + 1))
    assert refused(path, capsys) == f"{path}: {key}: has {MAX_ARCH_LIST + 1} entries; at most {MAX_ARCH_LIST}"


def test_the_recipe_file_is_at_most_the_exports_config_size(tmp_path, capsys):
    def padded(size: int) -> str:
        return GOOD + "#" * (size - len(GOOD) - 1) + "\n"

    at = recipe(tmp_path / "at", padded(MAX_CONFIG_BYTES))
    assert at.stat().st_size == MAX_CONFIG_BYTES
    assert read_config(at, bench.RECIPE_BOUNDS).bootstrap == 1000
    past = recipe(tmp_path / "past", padded(MAX_CONFIG_BYTES + 1))
    assert refused(past, capsys) == (
        f"{past}: {MAX_CONFIG_BYTES + 1} bytes; a recipe is at most {MAX_CONFIG_BYTES}"
    )


def test_a_recipe_of_300000_predictors_is_refused_in_one_line(tmp_path, capsys):
    path = recipe(tmp_path, CORPUS + "predictors:\n" + "  - distillmos\n" * 300_000)
    assert refused(path, capsys).startswith(f"{path}: {path.stat().st_size} bytes; a recipe is at most ")


def test_an_integer_has_at_most_the_exports_digits(tmp_path, capsys):
    longest = "9" * MAX_INTEGER_DIGITS
    assert read_config(recipe(tmp_path / "at", GOOD + f"seed: {longest}\n"), bench.RECIPE_BOUNDS).seed == int(
        longest
    )
    # 101 digits, and past Python's own limit of conversion (4300), which ended in a traceback.
    for digits in (MAX_INTEGER_DIGITS + 1, 5000):
        path = recipe(tmp_path / str(digits), GOOD + f"seed: {'9' * digits}\n")
        assert refused(path, capsys) == (
            f"{path}: line 3: an integer of {digits} digits; a recipe's integers have at most "
            f"{MAX_INTEGER_DIGITS}"
        )
    # A score range past any float: refused as its digits, not an OverflowError.
    huge = recipe(
        tmp_path / "range", f"corpora: [{{name: c, manifest: m.csv, score_range: [0, {10**400}]}}]\n"
    )
    assert "an integer of 401 digits" in refused(huge, capsys)


def test_a_yaml_alias_is_refused_as_in_an_export(tmp_path, capsys):
    path = recipe(tmp_path, "corpora: &c [{name: c, manifest: m.csv}]\npredictors: [distillmos]\nx: *c\n")
    assert refused(path, capsys) == f"{path}: line 3: a recipe holds no YAML alias (*name)"


SECRET = "TOPSECRET-first-line,not-a-column"


def secret_manifest(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{SECRET}\n1,2\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("named", ["absolute", "relative", "link"])
def test_a_manifest_outside_the_recipes_folder_is_named_but_none_of_it_quoted(tmp_path, capsys, named):
    secret = secret_manifest(tmp_path / "private" / "secret.csv")
    folder = tmp_path / "recipe"
    folder.mkdir()
    # A link inside the folder to the file outside is outside too: the file is what is read.
    (folder / "inside.csv").symlink_to(secret)
    manifest = {"absolute": str(secret), "relative": "../private/secret.csv", "link": "inside.csv"}[named]
    path = recipe(folder, f"corpora: [{{name: c, manifest: {manifest}}}]\npredictors: [distillmos]\n")
    assert bench.main([str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"sqa-bench: {path}: corpora[0].manifest: {folder / manifest} is no manifest sqa-bench reads "
        "(a CSV table with the columns wav_path, score and system_id); it lies outside the recipe's "
        f"folder {folder.resolve()}, so none of its content is shown: copy it beside the recipe to see what "
        "is wrong"
    ]
    assert "TOPSECRET" not in err and "not-a-column" not in err


def test_a_manifest_in_the_recipes_folder_keeps_the_readers_whole_error(tmp_path, capsys):
    secret_manifest(tmp_path / "recipe" / "data" / "own.csv")
    path = recipe(
        tmp_path / "recipe", "corpora: [{name: c, manifest: data/own.csv}]\npredictors: [distillmos]\n"
    )
    assert bench.main([str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sqa-bench: {path}: corpora[0] (c): ") and "missing column(s)" in err
    assert "TOPSECRET" in err  # the recipe's own file: its columns help
