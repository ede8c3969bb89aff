"""A webMUSHRA study as webMUSHRA writes it: its results CSV read with the config YAML it ran.

webMUSHRA (github.com/audiolabs/webMUSHRA) runs a config `configs/<name>.yaml`: `pages`, where a
list whose first element is the string `random` is a block shown in random order and a page has
a `type`, an `id`, a `stimuli` map of condition keys to audio files and (MUSHRA) a `reference`;
file paths are relative to the folder webMUSHRA runs from, the parent of `configs/`. Its
`service/write.php` appends each session's ratings to `results/<testId>/<page type>.csv`:

    mushra.csv   session_test_id, <questionnaire fields>, session_uuid, trial_id, rating_stimulus,
                 rating_score, rating_time, rating_comment (0-100; the hidden reference's
                 rating_stimulus is `reference`, generated anchors are `anchor35` and `anchor70`)
    lss.csv      session_test_id, <questionnaire fields>, trial_id, stimuli_rating (or
                 stimuli_rating1..N, one per Likert scale), stimuli, rating_time
    lms.csv      session_test_id, <questionnaire fields>, trial_id, stimuli_rating, stimuli, rating_time

bs1116.csv, paired_comparison.csv and spatial_*.csv hold other kinds of answer than a rating of
one stimulus and are refused, naming their page type.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sqa.data.corpus import DEFAULT_DOMAIN, ROLE_ANCHOR, ROLE_REFERENCE, Clip, Corpus, CorpusError
from sqa.data.readers.columns import csv_rows
from sqa.data.readers.common import read_text

log = logging.getLogger(__name__)

MUSHRA = "mushra"
LIKERT_SINGLE = "likert_single_stimulus"
LIKERT_MULTI = "likert_multi_stimulus"
# The file write.php writes each rated page type's answers to, and the columns sqa reads there.
RESULT_FILES = {MUSHRA: "mushra.csv", LIKERT_SINGLE: "lss.csv", LIKERT_MULTI: "lms.csv"}
MUSHRA_COLUMNS = ("session_uuid", "trial_id", "rating_stimulus", "rating_score")
LIKERT_COLUMNS = ("trial_id", "stimuli")
# Page types whose answers are no rating of one stimulus, and what they are instead.
REFUSED_TYPES = {
    "bs1116": "a grade of a stimulus against its reference, without a session ID (bs1116.csv)",
    "paired_comparison": "a preference between two stimuli, not a score (paired_comparison.csv)",
    "spatial": "positions of a sound in space, not a score (spatial_*.csv)",
}
# The hidden reference's key in mushra.csv, and the anchors MUSHRA pages low-pass filter from
# the reference in the browser (createAnchor35, createAnchor70): no file holds their audio.
REFERENCE_KEY = "reference"
GENERATED_ANCHORS = {"anchor35": "createAnchor35", "anchor70": "createAnchor70"}
MUSHRA_RANGE = (0.0, 100.0)
# What a Likert page writes for a scale left unanswered.
NOT_ANSWERED = "NA"


class _CoreSchemaLoader(yaml.SafeLoader):
    """YAML as webMUSHRA's js-yaml reads it: only true and false are booleans (not yes, no, on, off)."""


_BOOL = "tag:yaml.org,2002:bool"
_CoreSchemaLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_CoreSchemaLoader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


@dataclass(frozen=True)
class _Page:
    """A rated page of the config: its type, audio by condition key and Likert scales."""

    type: str
    stimuli: Mapping[str, str]
    # MUSHRA: the generated anchors it adds; Likert: each scale's score by response value.
    anchors: frozenset[str] = frozenset()
    scales: tuple[Mapping[str, float], ...] = ()


def read_webmushra(
    results: str | Path,
    config: str | Path,
    root: str | Path | None = None,
    anchors: Sequence[str] = (),
    likert_scale: int | None = None,
    sample_rate_filter: int | None = None,
) -> Corpus:
    """Read webMUSHRA's `results` CSV (mushra.csv, lss.csv or lms.csv) with the `config` YAML it ran.

    Each (trial_id, stimulus) rated is one clip, `<trial_id>/<stimulus>`: its audio is the file
    the trial's page names for the stimulus, relative to `root` (None: the folder holding the
    config's `configs/` folder, where webMUSHRA runs from; a relative `results` and `config`
    resolve against `root` where one is given), its system the stimulus key, its song the trial
    (so that carving by song keeps each trial on one side), its score the mean over sessions
    of each session's mean rating (`Clip.ratings` by `session_uuid`). A MUSHRA page's hidden
    `reference` is a clip of system `reference` with the reference role; the keys in `anchors`
    are anchors on every page; the anchors webMUSHRA generates (anchor35, anchor70) have no
    audio file and are left out, said in the log. MUSHRA ratings are on 0-100. A Likert
    point scores its value where every value of the scale is a number, else its position
    (1 = first); lss.csv and lms.csv carry no session ID, so each row counts once and no
    listener is known; `likert_scale` (1 = first) picks the scale of pages with several.
    A row whose trial or stimulus the config lacks, of another test than the config's, or
    of a page type sqa cannot read is a CorpusError naming the line and both files.
    """
    # `data.corpus.anchors=C1` on the command line gives one key, not a list.
    anchors = [anchors] if isinstance(anchors, str) else list(anchors)
    base = Path(root) if root is not None else None
    results = base / results if base is not None else Path(results)
    config = base / config if base is not None else Path(config)
    pages, test_id = _read_config(config)
    base = base if base is not None else webmushra_root(config)
    unknown = sorted(set(anchors) - {k for p in pages.values() for k in p.stimuli})
    if unknown:
        raise CorpusError(f"data.corpus.anchors names {unknown}, which no rated page of {config} has")
    columns, rows = csv_rows(read_text(results), results)
    missing = [c for c in ("session_test_id", "trial_id") if c not in columns]
    if missing:
        raise CorpusError(f"{results}: no {' or '.join(missing)} column: not a results file of webMUSHRA")
    if not rows:
        raise CorpusError(f"{results}: no ratings, only a header")
    ratings: dict[tuple[str, str], list[tuple[str, float]]] = {}
    problems: dict[tuple[str, str], list[str]] = {}
    # The Likert scale each trial's rows were read on: the corpus has one scale.
    scales: dict[str, tuple[float, float]] = {}
    generated = 0
    page_type = None
    for line, row in rows:
        where = f"line {line} of {results}"
        if test_id is not None and row["session_test_id"] != test_id:
            raise CorpusError(
                f"{where}: session_test_id {row['session_test_id']!r} is not the testId {test_id!r} "
                f"of {config}: are these the results of that config?"
            )
        trial = row["trial_id"]
        page = pages.get(trial)
        if page is None:
            raise CorpusError(
                f"{where}: trial {trial!r} is no rated page of {config} (pages: {sorted(pages)})"
            )
        if page_type is None:
            _check_columns(page.type, columns, results, trial, config)
            page_type = page.type
        elif page.type != page_type:
            raise CorpusError(f"{where}: trial {trial!r} is a {page.type} page, the trials above {page_type}")
        stimulus = row["rating_stimulus" if page.type == MUSHRA else "stimuli"]
        if stimulus in page.anchors:
            generated += 1
            continue
        if stimulus not in page.stimuli:
            raise CorpusError(
                f"{where}: stimulus {stimulus!r} of trial {trial!r} is not in that page of {config} "
                f"(its stimuli: {sorted(page.stimuli)})"
            )
        key = (trial, stimulus)
        said = problems.setdefault(key, [])
        if page.type == MUSHRA:
            listener = row["session_uuid"]
            score = _number(row["rating_score"])
            if score is None:
                said.append(f"{where}: rating_score {row['rating_score']!r} is no number")
        else:
            # A Likert row names no session: each row is a rating of its own.
            listener = f"line {line}"
            column, scale = _likert_scale(row, page, likert_scale, where, config)
            scales[trial] = (min(scale.values()), max(scale.values()))
            score = _likert_value(row[column], scale, f"{where}: {column}", said)
        ratings.setdefault(key, [])
        if score is not None:
            ratings[key].append((listener, score))
    if generated:
        log.info(
            "%s: %d rating(s) of the anchors webMUSHRA generates (%s) left out: no file holds their audio",
            results,
            generated,
            ", ".join(GENERATED_ANCHORS),
        )
    clips = [
        _clip(trial, stimulus, scores, pages[trial], base, set(anchors), problems[trial, stimulus])
        for (trial, stimulus), scores in ratings.items()
    ]
    scale = MUSHRA_RANGE if page_type == MUSHRA else _one_scale(scales, config)
    corpus = Corpus(clips, [DEFAULT_DOMAIN], scale)
    return corpus.filter_sample_rate(sample_rate_filter) if sample_rate_filter else corpus


def _clip(
    trial: str,
    stimulus: str,
    scores: list[tuple[str, float]],
    page: _Page,
    root: Path,
    anchors: set[str],
    problems: list[str],
) -> Clip:
    """The clip of one stimulus of one trial: its file under `root`, its mean score and role."""
    by_listener: dict[str, list[float]] = {}
    for listener, score in scores:
        by_listener.setdefault(listener, []).append(score)
    # A session that went back to a page and rated it again counts once, with its mean.
    means = {listener: sum(v) / len(v) for listener, v in by_listener.items()}
    if not scores and not problems:
        problems = [f"no session rated stimulus {stimulus!r} of trial {trial!r} (every row: {NOT_ANSWERED})"]
    if stimulus == REFERENCE_KEY and page.type == MUSHRA:
        role = ROLE_REFERENCE
    else:
        role = ROLE_ANCHOR if stimulus in anchors else None
    return Clip(
        sample_id=f"{trial}/{stimulus}",
        path=root / page.stimuli[stimulus],
        mos=sum(means.values()) / len(means) if means else math.nan,
        system_id=stimulus,
        domain=DEFAULT_DOMAIN,
        split="train",
        ratings=means if page.type == MUSHRA else {},
        role=role,
        problems=tuple(problems),
        song=trial,
    )


def _read_config(config: Path) -> tuple[dict[str, _Page], str | None]:
    """The config's rated pages by id (inside `random` blocks too) and its testId (None: unset)."""
    text = read_text(config)
    try:
        # A SafeLoader: no tag constructs anything but plain data.
        spec = yaml.load(text, Loader=_CoreSchemaLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise CorpusError(f"{config}{line}: not a webMUSHRA config, which is YAML ({err})") from None
    if not isinstance(spec, Mapping) or not isinstance(spec.get("pages"), list):
        raise CorpusError(f"{config}: not a webMUSHRA config: it has no `pages` list")
    pages: dict[str, _Page] = {}
    for entry in _flat_pages(spec["pages"], config):
        kind = str(entry.get("type"))
        if kind not in RESULT_FILES and kind not in REFUSED_TYPES:
            continue  # generic, consent, volume and finish pages rate nothing
        # webMUSHRA writes a page without an id with an empty trial_id.
        page_id = "" if entry.get("id") is None else _js_text(entry["id"])
        if page_id in pages:
            raise CorpusError(
                f"{config}: two rated pages have the id {page_id!r}; their results cannot be told apart"
            )
        pages[page_id] = _page(entry, kind, page_id, config)
    if not pages:
        raise CorpusError(f"{config}: no page rates stimuli (types {sorted(RESULT_FILES)})")
    test_id = spec.get("testId")
    return pages, None if test_id is None else _js_text(test_id)


def _flat_pages(entries: list[Any], config: Path) -> list[Mapping[str, Any]]:
    """The pages of a `pages` list in config order, those of nested lists (`random` blocks) too."""
    flat: list[Mapping[str, Any]] = []
    for i, entry in enumerate(entries):
        if isinstance(entry, list):
            flat.extend(_flat_pages(entry, config))
        elif isinstance(entry, Mapping):
            flat.append(entry)
        elif not (i == 0 and entry == "random"):
            raise CorpusError(f"{config}: pages entry {entry!r} is neither a page nor a list of pages")
    return flat


def _page(entry: Mapping[str, Any], kind: str, page_id: str, config: Path) -> _Page:
    """A rated page of the config; a CorpusError names the page where its stimuli or scale are malformed."""
    if kind in REFUSED_TYPES:
        return _Page(kind, {})
    stimuli = entry.get("stimuli")
    if not isinstance(stimuli, Mapping):
        raise CorpusError(f"{config}: {kind} page {page_id!r} has no `stimuli` map of keys to audio files")
    files = {_js_text(k): str(v) for k, v in stimuli.items()}
    if kind == MUSHRA:
        if entry.get("reference") is None:
            raise CorpusError(f"{config}: mushra page {page_id!r} has no `reference` audio file")
        generated = frozenset(k for k, flag in GENERATED_ANCHORS.items() if entry.get(flag))
        return _Page(kind, {**files, REFERENCE_KEY: str(entry["reference"])}, anchors=generated)
    response = entry.get("response")
    # A single stimulus page with several scales lists one response list per scale.
    scales = response if kind == LIKERT_SINGLE and response and isinstance(response[0], list) else [response]
    if not all(isinstance(s, list) and s and all(isinstance(p, Mapping) for p in s) for s in scales):
        raise CorpusError(f"{config}: {kind} page {page_id!r} has no `response` list of Likert points")
    return _Page(kind, files, scales=tuple(_scale_scores(s) for s in scales))


def _scale_scores(points: list[Mapping[str, Any]]) -> dict[str, float]:
    """Each Likert point's score by its value: the value where all are numbers, else its position."""
    values = [_js_text(p.get("value")).strip() for p in points]
    numbers = [_number(v) for v in values]
    if all(n is not None for n in numbers):
        return dict(zip(values, numbers, strict=True))
    return {v: float(i) for i, v in enumerate(values, start=1)}


def _check_columns(kind: str, columns: list[str], results: Path, trial: str, config: Path) -> None:
    """A CorpusError unless `results` has the columns that pages of `kind` (trial's type) write."""
    if kind in REFUSED_TYPES:
        readable = ", ".join(f"{t} pages ({f})" for t, f in RESULT_FILES.items())
        raise CorpusError(
            f"{results}: trial {trial!r} is a {kind} page of {config}, whose answers are "
            f"{REFUSED_TYPES[kind]}; sqa reads the ratings of {readable}"
        )
    needed = MUSHRA_COLUMNS if kind == MUSHRA else LIKERT_COLUMNS
    missing = [c for c in needed if c not in columns]
    if kind != MUSHRA and not any(c.startswith("stimuli_rating") for c in columns):
        missing.append("stimuli_rating")
    if missing:
        raise CorpusError(
            f"{results}: trial {trial!r} is a {kind} page of {config}, but the file lacks the column(s) "
            f"{missing} that webMUSHRA writes to its {RESULT_FILES[kind]} (columns: {columns})"
        )


def _likert_scale(
    row: Mapping[str, str], page: _Page, likert_scale: int | None, where: str, config: Path
) -> tuple[str, Mapping[str, float]]:
    """The column of a Likert row's rating and the scale it is on (`likert_scale` of several)."""
    if "stimuli_rating" in row:
        # One scale: write.php names its column without a number.
        index, column = 1, "stimuli_rating"
        if likert_scale not in (None, 1):
            raise CorpusError(f"{where}: the file has one Likert scale; leave data.corpus.likert_scale unset")
    elif likert_scale is None:
        several = sorted(c for c in row if c.startswith("stimuli_rating"))
        raise CorpusError(
            f"{where}: the file has a column per Likert scale ({', '.join(several)}); "
            "choose one with data.corpus.likert_scale=N (1 = the first)"
        )
    else:
        index, column = likert_scale, f"stimuli_rating{likert_scale}"
        if column not in row:
            raise CorpusError(
                f"{where}: data.corpus.likert_scale={likert_scale}, but the file has no {column}"
            )
    if index > len(page.scales):
        raise CorpusError(
            f"{where}: {column}, but the trial's page in {config} has {len(page.scales)} scale(s)"
        )
    return column, page.scales[index - 1]


def _likert_value(cell: str, scale: Mapping[str, float], where: str, problems: list[str]) -> float | None:
    """The score of a Likert answer (None: not answered, or a problem added to `problems`)."""
    # likert_multi_stimulus rows write the value with a space on either side.
    value = cell.strip()
    if value == NOT_ANSWERED:
        return None
    if value not in scale:
        problems.append(f"{where} {value!r} is none of the page's response values {sorted(scale)}")
        return None
    return scale[value]


def _one_scale(scales: Mapping[str, tuple[float, float]], config: Path) -> tuple[float, float]:
    """The one Likert scale the trials were rated on; a CorpusError names two trials that differ."""
    distinct = sorted(set(scales.values()))
    if len(distinct) > 1:
        first = next(t for t, r in scales.items() if r == distinct[0])
        other = next(t for t, r in scales.items() if r == distinct[1])
        raise CorpusError(
            f"{config}: pages {first!r} and {other!r} rate on the scales {distinct[0]} and {distinct[1]}; "
            "sqa trains on one scale"
        )
    return distinct[0]


def _js_text(value: Any) -> str:
    """A YAML scalar as webMUSHRA writes it to its results: JavaScript's String() of it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _number(cell: str) -> float | None:
    """The number in a cell, or None where it holds none (NaN and infinities are none either)."""
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def webmushra_root(config: Path) -> Path:
    """The folder webMUSHRA runs from: the parent of the `configs` folder that holds `config`."""
    for folder in config.resolve().parents:
        if folder.name == "configs":
            return folder.parent
    raise CorpusError(
        f"{config}: not inside a configs/ folder, where webMUSHRA keeps its configs; set data.corpus.root "
        "to the folder webMUSHRA runs from (its audio paths are relative to it)"
    )
