"""The CSV manifest reader (SHEET-style rows, one per rating): clips, their scores and roles.

Which table column is which of sqa's is settled in `sqa.data.readers.columns`; a cell that is
not a number is a problem of its clip (`Clip.problems`), reported with the others.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from sqa.data.corpus import (
    DEFAULT_DOMAIN,
    ROLE_ANCHOR,
    ROLE_REFERENCE,
    Clip,
    Corpus,
    CorpusError,
    canonical_split,
)
from sqa.data.readers.columns import (
    csv_columns,
    csv_rows,
    derive_sample_ids,
    detect_delimiter,
    matched_rater_columns,
)
from sqa.data.readers.common import natural_key, rating_scale, read_text
from sqa.metrics import AVERAGE_KEY

log = logging.getLogger(__name__)

# How a clip's replicate ratings (a listener's repeated rows) enter its score.
REPLICATE_MODES = ("per_listener", "pooled")
# A number written with a decimal comma, as spreadsheets in much of Europe export it ("4,5").
DECIMAL_COMMA = re.compile(r"\s*[+-]?\d*,\d+\s*")
# A number written with a thousands separator ("4,500", "1,234.5", "1.234,5"): never guessed, as
# "4,500" may be 4500 or a decimal comma's 4.5 on any scale. A leading 0 ("0,125") groups nothing.
THOUSANDS = re.compile(r"\s*[+-]?[1-9]\d{0,2}(?:(?:,\d{3})+(?:\.\d*)?|(?:\.\d{3})+,\d*)\s*")


def _numbers(
    group: list[tuple[int, dict[str, str]]],
    column: str,
    name: str,
    problems: list[str],
    commas: list[tuple[int, str]],
) -> list[tuple[int, float]]:
    """(position in `group`, value) of its rows with a number in `column`; others' cells go to `problems`.

    A decimal comma ("4,5") is a decimal mark, its (line, cell) noted in `commas`; a thousands
    separator ("4,500", `THOUSANDS`) is a problem saying how to write the number. Empty cells of
    an extra score column are no label; an empty `score` cell is a problem.
    """
    values = []
    for position, (line, row) in enumerate(group):
        cell = row[column]
        if cell == "" and column != "score":
            continue
        try:
            if "_" in cell:
                # Python's digit grouping ("4_500"), which float() reads as 4500: no table's number.
                raise ValueError(cell)
            values.append((position, float(cell)))
        except ValueError:
            if THOUSANDS.fullmatch(cell):
                problems.append(f"line {line} of {name}: {column} {cell!r}: {_thousands(cell)}")
            elif DECIMAL_COMMA.fullmatch(cell):
                values.append((position, float(cell.replace(",", "."))))
                commas.append((line, cell))
            else:
                problems.append(f"line {line} of {name}: {column} is not a number ({cell!r})")
    return values


def _thousands(cell: str) -> str:
    """How to write a number with a thousands separator (`THOUSANDS`), which sqa refuses."""
    text = cell.strip()
    # The separator is the mark that comes first: a decimal mark comes once, last.
    mark = "," if "," in text and ("." not in text or text.index(",") < text.index(".")) else "."
    whole = text.replace(mark, "").replace(",", ".").rstrip(".")
    # One comma before three digits, and no point: a decimal comma's as well ("4,500": 4.5).
    if text.count(",") == 1 and "." not in text:
        whole += f" or {text.replace(',', '.').rstrip('0').rstrip('.')}"
    return f"a thousands separator is never guessed; write {whole}, without a thousands separator"


def _wide_rows(
    table: list[tuple[int, dict[str, str]]], names: Mapping[str, str], raters: Sequence[str]
) -> list[tuple[int, dict[str, str]]]:
    """Rows by sqa's names: one per row of `table`, or one per rated cell of its `raters` columns.

    A rater column's cell is a rating (`score`) by that column (`listener_id`); an empty cell is
    no rating, and a row without any keeps one empty score (a problem of its clip).
    """
    rows = []
    for line, row in table:
        # A short row's missing cells are empty.
        base = {k: row.get(c) or "" for k, c in names.items()}
        rated = [(c, (row.get(c) or "").strip()) for c in raters]
        rated = [(c, cell) for c, cell in rated if cell]
        if not raters:
            rows.append((line, base))
        elif not rated:
            rows.append((line, {**base, "score": "", "listener_id": ""}))
        rows.extend((line, {**base, "score": cell, "listener_id": c}) for c, cell in rated)
    return rows


def _clip_score(ratings: list[tuple[str, float]], replicates: str) -> float:
    """A clip's score from its (listener, rating) rows, per listener first or pooled; NaN without any."""
    if not ratings:
        return math.nan
    if replicates == "pooled":
        return sum(v for _, v in ratings) / len(ratings)
    by_listener: dict[str, list[float]] = {}
    for listener, value in ratings:
        by_listener.setdefault(listener, []).append(value)
    means = [sum(v) / len(v) for v in by_listener.values()]
    return sum(means) / len(means)


def read_csv_manifest(
    path: str | Path,
    default_split: str | None = None,
    sample_rate_filter: int | None = None,
    score_range: Sequence[float] = (1.0, 5.0),
    encoding: str | None = None,
    replicates: str = "per_listener",
    reference_systems: Sequence[str] = (),
    anchor_systems: Sequence[str] = (),
    root: str | Path | None = None,
    columns: Mapping[str, str] | None = None,
    delimiter: str | None = None,
    rater_columns: str | Sequence[str] | None = None,
) -> Corpus:
    """Read a SHEET-style CSV manifest; rows of one sample from several listeners are averaged.

    Required columns: wav_path, score, system_id; sample_id too, or each clip's ID is its file's
    name without the extension (where two files share a name, the end of every file's path that
    tells them apart: `soprano/take1`). Optional: listener_id,
    domain_id, split (else `default_split`, by default "train", for every row; aliases such as
    `dev` or `eval` accepted), test_set, role (`reference`, `anchor` or empty), song_id (the piece
    a clip sings, `Clip.song`; empty: none) and extra score columns `score_<name>`. `columns`
    maps sqa's names to the table's (`{"score": "mos"}`); without it, common spellings
    (`COLUMN_SPELLINGS`: filename, mos, model, ...) are recognised where the table lacks sqa's
    name, and what was recognised or derived is logged in one line.
    A manifest of training rows only gets its test and validation splits carved by the data module.
    A relative `path` resolves against `root` where one is given (the corpus folder, which an
    export records so that the corpus can move); relative audio paths against the CSV's folder.
    The rows' scores by `listener_id` (where given; a listener's repeated rows averaged) are
    kept in `Clip.ratings`. A clip's score is
    the mean over its listeners of each listener's mean rating (`replicates="per_listener"`: a
    listener who rated a clip twice counts once; rows without a listener count as one listener
    each) or the mean of all its rows (`"pooled"`). The clips of `reference_systems` and
    `anchor_systems` (or of rows whose `role` says so) are listening-test references and anchors.
    A score cell that is not a number is a problem of its clip (`Clip.problems`), reported with
    every other one before training; one audio file under several sample IDs is warned about.
    The file is UTF-8 (a byte-order mark is fine) unless `encoding` names another (e.g.
    "latin-1"); `score_range` is the rating scale that scores and ratings are checked against.
    Its separator is `delimiter` (",", ";" or a tab), or, where None, the one an Excel `sep=`
    first line names, else the one of those that splits the header line into most fields; a row
    of more or fewer fields than the header is a CorpusError naming its line. A number with a
    decimal comma ("4,5") is read as 4.5 (said once in the log); one with a thousands separator
    ("4,500", "1,234.5") is never guessed at: a problem of its clip saying how to write it. A
    wide table, one row per clip and a column per rater, is read with `rater_columns` (column
    names or shell patterns, e.g. "rater_*"): each non-empty cell is that rater's rating (the
    column name is its `listener_id`); such a table has no score or listener_id column.
    """
    scale = rating_scale(score_range)
    if replicates not in REPLICATE_MODES:
        raise ValueError(f"replicates must be one of {list(REPLICATE_MODES)}, got {replicates!r}")
    roles = {**{s: ROLE_ANCHOR for s in anchor_systems}, **{s: ROLE_REFERENCE for s in reference_systems}}
    path = Path(root) / path if root is not None else Path(path)
    text = read_text(path, encoding, " or set data.corpus.encoding (e.g. latin-1)")
    separator = delimiter if delimiter is not None else detect_delimiter(text)
    found, table = csv_rows(text, path, separator)
    raters = matched_rater_columns(found, rater_columns, path) if rater_columns else []
    wide = ("score", "listener_id") if raters else ()
    names, recognised = csv_columns([c for c in found if c not in raters], columns, path, wide)
    both = [f"{names[k]!r} as {k}" for k in wide if k in names]
    if both:
        raise CorpusError(
            f"{path}: data.corpus.rater_columns reads each rating from a rater's column, but the table "
            f"also has {' and '.join(both)}; leave rater_columns out, or drop those columns"
        )
    rows = _wide_rows(table, names, raters)
    extra_cols = [k for k in names if k.startswith("score_")]
    said = [f"read with {separator!r} as the separator"] if separator != "," else []
    said += [f"recognised columns {', '.join(recognised)}"] if recognised else []
    if raters:
        said.append(f"ratings from {len(raters)} rater column(s): {', '.join(map(repr, raters))}")
    if "sample_id" not in names:
        said.append(derive_sample_ids([row for _, row in rows], path, names["wav_path"]))
    unread = [c for c in found if c not in names.values() and c not in raters]
    if said and unread:
        said.append(f"columns left unread: {', '.join(map(repr, unread))}")
    if said:
        # What was assumed, said once, with the setting that says otherwise.
        log.info("%s: %s (data.corpus.columns names the columns otherwise)", path, "; ".join(said))
    if "split" not in names and default_split is None:
        default_split = "train"
    grouped: dict[str, list[tuple[int, dict[str, str]]]] = {}
    for lineno, row in rows:
        grouped.setdefault(row["sample_id"], []).append((lineno, row))
    commas: list[tuple[int, str]] = []
    clips = []
    for sample_id, group in grouped.items():
        lineno, first = group[0]
        for other_line, other in group[1:]:
            for key in ("wav_path", "system_id", "domain_id", "split", "test_set", "role", "song_id"):
                if other.get(key) != first.get(key):
                    raise CorpusError(
                        f"{path}:{other_line}: {key} of sample {sample_id!r} differs from line {lineno}"
                    )
        problems: list[str] = []
        scores = dict(_numbers(group, "score", path.name, problems, commas))
        # A wide table's row gives several ratings: rows are told apart by position, not line.
        listeners = {i: r.get("listener_id") or f"row {n}" for i, (n, r) in enumerate(group)}
        mos = _clip_score([(listeners[i], v) for i, v in scores.items()], replicates)
        extra = {}
        for col in extra_cols:
            values = [v for _, v in _numbers(group, col, path.name, problems, commas)]
            if values:
                extra[col.removeprefix("score_")] = sum(values) / len(values)
        by_listener: dict[str, list[float]] = {}
        for i, value in scores.items():
            if group[i][1].get("listener_id"):
                by_listener.setdefault(listeners[i], []).append(value)
        wav = Path(first["wav_path"])
        if not (first.get("split") or default_split):
            raise CorpusError(
                f"{path}:{lineno}: empty split of sample {sample_id!r}; fill it in or set "
                "data.corpus.default_split=train"
            )
        split = canonical_split(str(first.get("split") or default_split), f"{path}:{lineno}")
        role = (first.get("role") or "").strip().lower() or roles.get(first["system_id"])
        if role not in (None, ROLE_REFERENCE, ROLE_ANCHOR):
            raise CorpusError(
                f"{path}:{lineno}: role {first['role']!r} of sample {sample_id!r} is not "
                f"{ROLE_REFERENCE!r}, {ROLE_ANCHOR!r} or empty"
            )
        clips.append(
            Clip(
                sample_id=sample_id,
                path=wav if wav.is_absolute() else path.parent / wav,
                mos=mos,
                system_id=first["system_id"],
                domain=first.get("domain_id") or DEFAULT_DOMAIN,
                split=split,
                test_set=_test_set(first, split, f"{path}:{lineno}"),
                extra_scores=extra,
                ratings={k: sum(v) / len(v) for k, v in by_listener.items()},
                role=role,
                problems=tuple(problems),
                song=first.get("song_id") or None,
            )
        )
    if commas:
        line, cell = commas[0]
        log.info(
            "%s: %d number(s) with a decimal comma read as decimals (line %d: %r)",
            path,
            len(commas),
            line,
            cell,
        )
    _warn_shared_files(clips, path)
    domains = sorted({c.domain for c in clips}, key=natural_key)
    corpus = Corpus(clips, domains, scale)
    return corpus.filter_sample_rate(sample_rate_filter) if sample_rate_filter else corpus


def _warn_shared_files(clips: Sequence[Clip], path: Path) -> None:
    """Warn of audio files that the manifest `path` names under more than one sample ID."""
    ids: dict[Path, list[str]] = {}
    for clip in clips:
        ids.setdefault(clip.path, []).append(clip.sample_id)
    shared = {f: i for f, i in ids.items() if len(i) > 1}
    if not shared:
        return
    listed = "; ".join(f"{str(f)!r} as {', '.join(map(repr, i))}" for f, i in list(shared.items())[:3])
    more = f"; and {len(shared) - 3} more" if len(shared) > 3 else ""
    # Not an error: each row is readable, and a listening test may rate one file twice on purpose.
    # But the copies' ratings stay apart, and carving can put one in training and one in test.
    log.warning(
        "%s: %d audio file(s) appear under more than one sample ID: %s%s; such a file is several clips, "
        "rated apart, that can land in different splits (give it one sample_id to pool its ratings)",
        path,
        len(shared),
        listed,
        more,
    )


def _test_set(row: Mapping[str, str], split: str, where: str) -> str | None:
    """A test clip's test set (`test` where the column is absent or empty); the average's name is reserved."""
    if split != "test":
        return None
    name = row.get("test_set") or "test"
    if name.strip().lower() == AVERAGE_KEY:
        raise CorpusError(
            f"{where}: test_set {name!r} is reserved for the average over the test sets; rename it"
        )
    return name
