"""The folds of a cross-validation: groups of clips, whole, and what the folds can compare on.

Clips are grouped by song where every clip names one (and there are enough songs), else by
system; fold 0 is the run's own validation split, held out whole, and the training groups are
dealt out among the other folds (`sqa.training.crossval` fits and judges the candidates on them).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
from omegaconf import DictConfig

from sqa import metrics
from sqa.data.corpus import Clip, Corpus, LabelCounts
from sqa.training.candidates import comparison
from sqa.training.selection import SelectionRule, can_rank


def grouping(clips: Sequence[Clip], k: int) -> tuple[str, dict[str, str]] | None:
    """The unit `clips` are grouped by for `k` folds and each clip's group: songs, else systems; None.

    Songs where every clip names one and there are at least `k`; else systems where there are at
    least `k`; None where neither can make `k` folds.
    """
    songs = {c.sample_id: str(c.song) for c in clips if c.song}
    if len(songs) == len(clips) and len(set(songs.values())) >= k:
        return "song", songs
    systems = {c.sample_id: c.system_id for c in clips}
    if len(set(systems.values())) >= k:
        return "system", systems
    return None


def too_small(valid: Sequence[Clip], groups: Mapping[str, str], by: str, cfg: DictConfig) -> str | None:
    """Why the validation clips `valid` cannot choose among candidates (None: they can).

    Fewer groups (`groups` maps a clip to its `by`) than `selection.min_systems`, or fewer
    distinct labels than `selection.min_distinct_labels`.
    """
    min_groups, min_labels = int(cfg.selection.min_systems), int(cfg.selection.min_distinct_labels)
    held = {groups[c.sample_id] for c in valid if c.sample_id in groups}
    labels = {round(c.mos, 9) for c in valid}
    reasons = []
    if len(held) < min_groups:
        reasons.append(f"{len(held)} {by}s (selection.min_systems={min_groups})")
    if len(labels) < min_labels:
        reasons.append(f"{len(labels)} distinct labels (selection.min_distinct_labels={min_labels})")
    if not reasons:
        return None
    return f"validation holds {' and '.join(reasons)}: too few to choose among candidates"


def deal(groups: Mapping[str, str], k: int, seed: int) -> list[frozenset[str]]:
    """The sample IDs of each of `k` folds: whole groups shuffled by `seed`, each to the smallest fold.

    `groups` maps a sample ID to its group. Folds differ in size by at most the largest group.
    """
    members: dict[str, list[str]] = {}
    for sample_id, group in groups.items():
        members.setdefault(group, []).append(sample_id)
    names = sorted(members)
    order = np.random.default_rng([seed, zlib.crc32(b"folds")]).permutation(len(names))
    shuffled = [names[i] for i in order]
    # Largest groups first (a stable sort keeps the shuffle among equal sizes), each to the fold
    # with the fewest clips so far (the first such fold on a tie).
    shuffled.sort(key=lambda g: -len(members[g]))
    folds: list[list[str]] = [[] for _ in range(k)]
    for group in shuffled:
        smallest = min(range(k), key=lambda i: len(folds[i]))
        folds[smallest].extend(members[group])
    return [frozenset(f) for f in folds]


def own_fold(corpus: Corpus, groups: Mapping[str, str]) -> frozenset[str] | None:
    """The run's validation clips as fold 0 (None: a validation group also has training clips)."""
    valid = {c.sample_id for c in corpus.split("valid")}
    train = {groups[c.sample_id] for c in corpus.split("train")}
    if any(groups[i] in train for i in valid):
        return None
    return frozenset(valid)


def fold_comparison(
    cfg: DictConfig, rule: SelectionRule, folds: Sequence[LabelCounts]
) -> tuple[str, str, str]:
    """The metric, level and mode the folds compare candidates on.

    The run's requested ranking metric (`selection.metric`) at its level, else at utterance level,
    where every fold's held-out clips can rank at that level (`selection.can_rank`, the
    selection's own thresholds): together the folds hold the groups and labels that one small
    validation set lacks. Else, and for a requested error, the run's own comparison.
    """
    selection = cfg.selection
    metric, level = str(selection.metric), str(selection.level)
    if metric in metrics.RANKING_METRICS:
        thresholds = (
            int(selection.min_systems),
            int(selection.min_distinct_labels),
            float(selection.min_clips_per_system),
        )
        for at in dict.fromkeys((level, "utt")):
            if all(can_rank(c, at, *thresholds) for c in folds):
                return metric, at, "max"
    return comparison(rule)


def fold_corpus(corpus: Corpus, held_out: frozenset[str]) -> Corpus:
    """`corpus` with its training and validation clips re-split: `held_out` validates, the rest trains."""
    clips = [
        replace(c, split="valid" if c.sample_id in held_out else "train")
        if c.split in ("train", "valid")
        else c
        for c in corpus.clips
    ]
    return Corpus(clips, corpus.domains, corpus.score_range, corpus.systems)
