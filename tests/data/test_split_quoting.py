"""Split CSVs quote formula-like cells as predictions.csv does, and read back the sample IDs they were given.

`valid_split.csv` and `test_split.csv` (`write_valid_split`) put a `'` before a cell a spreadsheet
would run as a formula; `read_valid_split` removes exactly that `'`. Text that reads as a number
(`-1`) is a number to a spreadsheet too, and is kept as it is, in both files. A file written
before the quoting reads as it did.
"""

from __future__ import annotations

import csv
import io
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sqa.core.artefacts import FORMULA_STARTS, csv_text, quoted_cell, spreadsheet_safe, unquoted_cell
from sqa.data.corpus import Clip, Corpus
from sqa.data.valid_split import read_valid_split, write_valid_split

HOSTILE = [
    "=SYS1()",
    "+cmd1",
    "-x",
    "@a",
    "'=already",
    "''=twice",
    "'",
    "'plain",
    "a,b",
    'say "hi"',
    "two\r\nlines",
    "\tx",
    "\r=1",
    "-1",
    "-0.5e3",
    "'-1",
    "plain",
]
# Any text a sample ID may hold: UTF-8 without NUL (which no CSV reader takes).
texts = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=12)


def clips(sample_ids: list[str], system: str = "SYS", domain: str = "batch") -> list[Clip]:
    """Training clips with these sample IDs."""
    return [Clip(i, Path(f"{k}.wav"), 3.0, system, domain, "train") for k, i in enumerate(sample_ids)]


def rows(path: Path) -> list[list[str]]:
    """The cells of a CSV file as written."""
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.reader(fh))


def test_hostile_sample_ids_read_back_and_formulas_are_quoted_as_in_predictions_csv(tmp_path):
    split = tmp_path / "valid_split.csv"
    write_valid_split(clips(HOSTILE, system="=SYS()", domain="@batch"), split)
    assert read_valid_split(split) == sorted(HOSTILE)
    written = {row[0]: row for row in rows(split)[1:]}
    assert written["'=SYS1()"] == ["'=SYS1()", "'=SYS()", "'@batch"]
    assert {"'+cmd1", "'-x", "'@a", "'\tx", "'\r=1", "''=already", "'''=twice"} <= set(written)
    # Numbers are no formulas: kept as they are, a `'` before one included.
    assert {"-1", "-0.5e3", "'-1", "'", "'plain"} <= set(written)
    # The cells predictions.csv writes for the same IDs (those not starting with a `'`).
    table = csv_text(["sample_id"], [{"sample_id": i} for i in HOSTILE if not i.startswith("'")])
    predicted = {row[0] for row in csv.reader(io.StringIO(table, newline=""))} - {"sample_id"}
    assert predicted <= set(written)


def test_a_test_split_csv_quotes_and_reads_back_the_same_way(tmp_path):
    corpus = Corpus(clips(HOSTILE), ["batch"])
    split = tmp_path / "test_split.csv"
    write_valid_split(corpus.clips[:5], split)
    moved = corpus.with_test(read_valid_split(split), split)
    assert sorted(c.sample_id for c in moved.split("test")) == sorted(HOSTILE[:5])


def test_a_split_csv_written_before_the_quoting_reads_as_it_did(tmp_path):
    # The writer of before: cells as they are. A run recorded with it resumes, or is evaluated,
    # on the same clips.
    old_ids = ["=SYS1()", "+cmd1", "-x", "@a", "-1", "'plain", "'", "a,b"]
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["sample_id", "system_id", "domain"])
    writer.writerows([i, "=SYS()", "batch"] for i in sorted(old_ids))
    old = tmp_path / "valid_split.csv"
    old.write_text(buffer.getvalue(), encoding="utf-8", newline="")
    assert read_valid_split(old) == sorted(old_ids)
    corpus = Corpus(clips([*old_ids, "kept"]), ["batch"])
    assert [c.sample_id for c in corpus.with_valid(read_valid_split(old), old).split("train")] == ["kept"]


@given(texts)
def test_a_quoted_cell_reads_back_and_is_never_a_formula(text):
    cell = quoted_cell(text)
    assert unquoted_cell(cell) == text
    assert not cell.startswith(FORMULA_STARTS) or spreadsheet_safe(cell) == cell
    if not text.startswith("'"):
        assert cell == spreadsheet_safe(text)


@settings(max_examples=50)
@given(st.lists(texts, min_size=1, max_size=6, unique=True))
def test_any_sample_ids_read_back_from_a_split_csv(sample_ids):
    with tempfile.TemporaryDirectory() as tmp:
        split = Path(tmp) / "valid_split.csv"
        write_valid_split(clips(sample_ids), split)
        assert read_valid_split(split) == sorted(sample_ids)
