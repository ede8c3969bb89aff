"""Systems ranked by their clips' mean score, with bootstrap intervals, and each adjacent pair compared.

A clip's system, by precedence (`clip_layout`):

1. its manifest's `system_id` (or `system`) column;
2. its folder: a clip found in a subfolder of a folder given (or of a glob pattern's part before
   its first wildcard) belongs to the first folder under it (`audio/` given, `audio/sysA/x.wav`:
   sysA); the other clips without a manifest system (files named one by one, list and manifest
   entries, clips lying directly in a folder given) are taken together: where each of them lies
   directly in a subfolder of the deepest folder holding them all, that subfolder is its system
   (`audio/sysA audio/sysB` given, or the shell's expansion of `audio/*/*.wav`: sysA, sysB);
   otherwise (all in one folder, as SingMOS-Pro's flat `wav/`, or at different depths) none of
   them takes its system from its folder;
3. its file name `<sys>-<utt>` (SingMOS-Pro, VMC'24: sys0001-utt0001).

A clip's item (what it renders: an excerpt every system sings) is its manifest's song or item
column (`ITEM_COLUMNS`), else, where its system is its folder, its path below that folder without
the suffix (`audio/sysA/song_1.wav`: song_1). Two systems that share at least two items are
compared on those items alone, paired: each resample draws items, and the difference is the mean
over them of the item's mean under one system minus the other. Otherwise each system's clips are
resampled on their own (unpaired).

Every resample is seeded from `seed` and the names it concerns, so a system's interval does not
depend on which other systems were scored. The intervals are percentile 95 % intervals of the
resampled means (`sqa.core.resampling`); p is two-sided as `sqa.reports.significance.summarise`
gives it, and a difference is significant where its interval excludes 0.
"""

from __future__ import annotations

import math
import os
import statistics
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

import numpy as np

from sqa.core import resampling
from sqa.exports.bounds import MAX_BOOTSTRAP
from sqa.scoring.inputs import ITEM_COLUMNS, SYSTEM_COLUMNS

DEFAULT_RESAMPLES = 1000
# As many as an export's test bootstrap may draw.
MAX_RESAMPLES = MAX_BOOTSTRAP
SEED = 0
# Fewest clips (or shared items) for an interval: with one, every resample is that clip.
MIN_POINTS = 2


@dataclass(frozen=True)
class Layout:
    """Per clip its system (None: none could be told) and its item (None: none)."""

    systems: list[str | None]
    items: list[str | None]


@dataclass(frozen=True)
class SystemMean:
    """A system's mean score over its `n` scored clips and its 95 % bootstrap interval (None: n < 2).

    `score` is None for a system without a scored clip.
    """

    system_id: str
    n: int
    score: float | None
    lo: float | None
    hi: float | None


@dataclass(frozen=True)
class Comparison:
    """`above` − `below` of two systems adjacent in the ranking, its 95 % interval, p and verdict.

    `items`: the shared items a paired comparison rests on, None for an unpaired one. `lo`, `hi`
    and `p` are None, and `significant` False, where a side has fewer than two clips.
    """

    above: str
    below: str
    diff: float
    lo: float | None
    hi: float | None
    p: float | None
    significant: bool
    items: int | None

    @property
    def pairing(self) -> str:
        """How the difference was resampled: "paired by N items" or "unpaired"."""
        return "unpaired" if self.items is None else f"paired by {self.items} items"


@dataclass(frozen=True)
class Ranking:
    """Systems by mean score, best first (those without a scored clip last), and each adjacent pair."""

    systems: list[SystemMean]
    comparisons: list[Comparison]
    resamples: int
    seed: int

    def lines(self) -> list[str]:
        """The ranking as a short table, then a line per adjacent pair (as `sqa-score --by-system` prints)."""
        width = max([6, *(len(s.system_id) for s in self.systems)])
        lines = [
            f"systems by mean score, best first, with 95 % bootstrap intervals over their clips "
            f"({self.resamples} resamples, seed {self.seed}):",
            f"rank  {'system':<{width}}  {'n':>5}  {'score':>7}  95 % interval",
        ]
        for rank, s in enumerate(self.systems, 1):
            if s.score is None:
                lines.append(f"{'-':>4}  {s.system_id:<{width}}  {s.n:>5}  {'n/a':>7}  no scored clip")
                continue
            ci = "n/a (one clip)" if s.lo is None else f"[{s.lo:.3f}, {s.hi:.3f}]"
            lines.append(f"{rank:>4}  {s.system_id:<{width}}  {s.n:>5}  {s.score:>7.3f}  {ci}")
        if self.comparisons:
            lines.append("adjacent systems, upper - lower:")
        names = max([0, *(len(c.above) + len(c.below) + 3 for c in self.comparisons)])
        for c in self.comparisons:
            head = f"  {c.above + ' - ' + c.below:<{names}}  {c.diff:+.3f}"
            if c.lo is None:
                lines.append(f"{head}  no interval (a side has one clip)  {c.pairing}")
                continue
            verdict = "significant" if c.significant else "not significant"
            p = f"<{1 / self.resamples:.2g}" if c.p == 0 else f"{c.p:.3f}"
            lines.append(f"{head}  [{c.lo:+.3f}, {c.hi:+.3f}]  p {p:<6}  {verdict:<15}  {c.pairing}")
        return lines


def name_system(path: str) -> str | None:
    """The `<sys>` of a `<sys>-<utt>` file name, else None."""
    parts = Path(path).stem.split("-")
    # SingMOS-Pro names clips sys0001-utt0001, VMC'24 voicemos2024-track2-sys0001-utt0001.
    return parts[-2] if len(parts) >= 2 and parts[-2] else None


def _under(path: str, top: str) -> tuple[str, str] | None:
    """(first folder under `top`, the rest of the path less its suffix) for a clip in a subfolder of `top`."""
    parts = PurePath(os.path.relpath(os.path.abspath(path), os.path.abspath(top))).parts
    if len(parts) < 2 or parts[0] == os.pardir:
        return None
    return parts[0], PurePath(*parts[1:]).with_suffix("").as_posix()


def _column(columns: Mapping[str, str], names: Sequence[str]) -> str | None:
    """The first non-empty value of `names` in a manifest row's `columns`, else None."""
    return next((columns[c].strip() for c in names if (columns.get(c) or "").strip()), None)


def common_folder(paths: Sequence[str]) -> str:
    """The deepest folder holding every one of `paths` (at least one), absolute."""
    return os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])


def clip_layout(
    paths: Sequence[str],
    tops: Sequence[str | None] | None = None,
    columns: Sequence[Mapping[str, str]] | None = None,
) -> Layout:
    """Each clip's system and item by the module's precedence: manifest, folder, `<sys>-<utt>` name.

    `tops`: per clip, the folder its walk started from (`sqa.scoring.inputs.Inputs.tops`), None
    for a clip named itself; without `tops`, every clip counts as named itself. `columns`: per
    clip, its manifest row (`Inputs.columns`).
    """
    tops = tops if tops is not None else [None] * len(paths)
    columns = columns if columns is not None else [{}] * len(paths)
    given = [_column(row, SYSTEM_COLUMNS) for row in columns]
    folders: list[tuple[str, str] | None] = [
        None if top is None or system is not None else _under(path, top)
        for path, top, system in zip(paths, tops, given, strict=True)
    ]
    loose = [i for i, found in enumerate(folders) if found is None and given[i] is None]
    if loose:
        root = common_folder([paths[i] for i in loose])
        found = [_under(paths[i], root) for i in loose]
        # Only a layout as plain as a folder per system (each clip directly in its own): loose
        # files from anywhere, at any depth, would otherwise be grouped by unrelated folders.
        if all(f is not None and "/" not in f[1] for f in found):
            for i, f in zip(loose, found, strict=True):
                folders[i] = f
    systems: list[str | None] = []
    items: list[str | None] = []
    for path, row, system, folder in zip(paths, columns, given, folders, strict=True):
        item = _column(row, ITEM_COLUMNS)
        if system is None and folder is not None:
            system, item = folder[0], item or folder[1]
        systems.append(system or name_system(path))
        items.append(item)
    return Layout(systems, items)


def unknown_systems(paths: Sequence[str], systems: Sequence[str | None]) -> str | None:
    """What to do about the clips of `paths` whose system could not be told (`clip_layout`), or None."""
    unknown = [p for p, s in zip(paths, systems, strict=True) if s is None]
    if not unknown:
        return None
    return (
        f"cannot tell the system of {len(unknown)} clip(s), e.g. {unknown[0]}; put each system's clips "
        "in a folder of its own (audio/<system>/...) and give the folder above them, name them "
        "<sys>-<utt>, or give a manifest with a system_id column"
    )


def _rng(seed: int, *names: str) -> np.random.Generator:
    """A generator of `seed` and `names`: a system's (a pair's) draws are its own, whatever else is ranked."""
    return np.random.default_rng([seed, *(zlib.crc32(n.encode("utf-8", "surrogateescape")) for n in names)])


def _resampled_means(values: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The mean of each of `resamples` bootstrap resamples of `values` (n,), (resamples,).

    Drawn in blocks of at most `resampling.PAIR_BLOCK` indices, which bounds memory whatever the
    number of clips; the draws are those of one `bootstrap_indices(rng, n, resamples)` call.
    """
    rows = max(1, resampling.PAIR_BLOCK // values.size)
    means = np.empty(resamples)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        means[start:stop] = values[resampling.bootstrap_indices(rng, values.size, stop - start)].mean(axis=1)
    return means


def _item_means(values: Sequence[float], items: Sequence[str | None]) -> dict[str, float]:
    """The mean score of each named item of a system's clips."""
    grouped: dict[str, list[float]] = {}
    for value, item in zip(values, items, strict=True):
        if item is not None:
            grouped.setdefault(item, []).append(value)
    return {item: statistics.fmean(v) for item, v in grouped.items()}


def _compare(
    above: str,
    below: str,
    clips: Mapping[str, tuple[list[float], list[str | None]]],
    resamples: int,
    seed: int,
) -> Comparison:
    """`above` − `below` of the clips {system: (scores, items)}: paired on shared items, else unpaired."""
    rng = _rng(seed, above, below)
    means = {s: _item_means(*clips[s]) for s in (above, below)}
    shared = sorted(means[above].keys() & means[below].keys())
    if len(shared) >= MIN_POINTS:
        diffs = np.array([means[above][i] - means[below][i] for i in shared])
        observed = float(np.mean(diffs))
        draws = _resampled_means(diffs, rng, resamples)
        items: int | None = len(shared)
    else:
        a, b = (np.asarray(clips[s][0], dtype=np.float64) for s in (above, below))
        observed = statistics.fmean(a) - statistics.fmean(b)
        items = None
        if min(a.size, b.size) < MIN_POINTS:
            return Comparison(above, below, observed, None, None, None, False, None)
        draws = _resampled_means(a, rng, resamples) - _resampled_means(b, rng, resamples)
    lo, hi = resampling.interval(draws)
    p = resampling.two_sided_p(draws)
    return Comparison(above, below, observed, lo, hi, p, bool(lo > 0 or hi < 0), items)


def rank_systems(
    scores: Sequence[float | None],
    systems: Sequence[str | None],
    items: Sequence[str | None] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = SEED,
) -> Ranking:
    """Systems ranked by their clips' mean score with 95 % bootstrap intervals, adjacent pairs compared.

    Per clip its score (None or NaN: no score, left out), its system and its item (None: none;
    `clip_layout` tells both from paths). A clip without a system is a ValueError naming the
    first; so is `resamples` outside 1..MAX_RESAMPLES. Ties in the mean are ranked by name.
    """
    if not 1 <= resamples <= MAX_RESAMPLES:
        raise ValueError(f"resamples must be 1 to {MAX_RESAMPLES}, got {resamples}")
    # Lists, so that pandas columns are taken by position (`in` looks at a Series' index).
    scores, systems = list(scores), list(systems)
    items = list(items) if items is not None else [None] * len(scores)
    if None in systems:
        raise ValueError(f"every clip needs a system; clip {systems.index(None)} has none")
    clips: dict[str, tuple[list[float], list[str | None]]] = {}
    for score, system, item in zip(scores, systems, items, strict=True):
        values, named = clips.setdefault(str(system), ([], []))
        if score is not None and not math.isnan(score):
            values.append(float(score))
            named.append(item)
    means = []
    for name, (values, _) in clips.items():
        lo = hi = None
        if len(values) >= MIN_POINTS:
            lo, hi = resampling.interval(_resampled_means(np.asarray(values), _rng(seed, name), resamples))
        mean = statistics.fmean(values) if values else None
        means.append(SystemMean(name, len(values), mean, lo, hi))
    means.sort(key=lambda s: (s.score is None, -(s.score or 0.0), s.system_id))
    ranked = [s.system_id for s in means if s.score is not None]
    pairs = zip(ranked[:-1], ranked[1:], strict=True)
    comparisons = [_compare(a, b, clips, resamples, seed) for a, b in pairs]
    return Ranking(means, comparisons, resamples, seed)
