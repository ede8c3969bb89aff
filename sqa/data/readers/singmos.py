"""Readers of the SingMOS layouts: SingMOS-Pro (info/split.json, info/score.json) and VMC'24 track 2.

Problems in the metadata's structure raise `CorpusError` naming the file and the key or line at
fault, never a bare KeyError.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from sqa.data.corpus import SPLITS, Clip, Corpus, CorpusError, accepted_split_names, canonical_split
from sqa.data.readers.common import natural_key, rating_scale, read_text

log = logging.getLogger(__name__)


def _load_json(path: Path) -> object:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise CorpusError(f"{path}: not valid JSON ({err})") from err


def _get(mapping: object, key: str, where: Path, context: str) -> object:
    """mapping[key], or a CorpusError naming the file, the place in it and the missing key."""
    if not isinstance(mapping, Mapping):
        raise CorpusError(f"{where}: expected an object at {context}, found {type(mapping).__name__}")
    if key not in mapping:
        raise CorpusError(f"{where}: missing key {key!r} at {context}")
    return mapping[key]


def _number(value: object, where: Path, context: str) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise CorpusError(f"{where}: {context} is not a number ({value!r})") from err


def _judge_ratings(score: Mapping, where: Path, context: str) -> dict[str, float] | None:
    """Ratings by judge from a score entry's parallel `judges` and `scores` lists.

    {} when the entry has no such lists; None when they are malformed (of different lengths or
    not numbers). A judge listed twice gets the mean of its ratings.
    """
    judges, values = score.get("judges"), score.get("scores")
    if judges is None or values is None:
        return {}
    if not isinstance(judges, list) or not isinstance(values, list) or len(judges) != len(values):
        return None
    grouped: dict[str, list[float]] = {}
    for judge, value in zip(judges, values, strict=True):
        try:
            grouped.setdefault(str(judge), []).append(_number(value, where, f"{context}['scores']"))
        except CorpusError:
            return None
    return {judge: sum(v) / len(v) for judge, v in grouped.items()}


def read_singmos_pro(
    root: str | Path,
    test_batches: Sequence[str] = ("singmospro-p1", "singmospro-p2", "singmospro-p3"),
    sample_rate_filter: int | None = None,
    score_range: Sequence[float] = (1.0, 5.0),
) -> Corpus:
    """Read the SingMOS-Pro layout (info/split.json, info/score.json, wav/).

    Domains are the annotation batches in split.json. The test part of the k-th entry of
    `test_batches` becomes test set `test{k}`; test parts of other batches join training.
    `sample_rate_filter=16000` keeps only 16 kHz clips, as the paper does. Per-judge ratings
    (`judges`/`scores` of an entry's `score`) are kept in `Clip.ratings`; malformed ones are
    left out with a warning, since only judge-aware training needs them. `score_range` is the
    rating scale that scores and ratings are checked against.
    """
    scale = rating_scale(score_range)
    root = Path(root)
    malformed: list[str] = []
    split_path, score_path = root / "info" / "split.json", root / "info" / "score.json"
    splits = _load_json(split_path)
    scores = _load_json(score_path)
    utterances = _get(scores, "utterance", score_path, "the top level")
    if not isinstance(splits, Mapping) or not splits:
        raise CorpusError(f"{split_path}: expected a non-empty object of annotation batches")
    for name in test_batches:
        if name not in splits:
            raise CorpusError(f"{split_path}: missing key {name!r} (a test batch) at the top level")
    test_names = {b: f"test{i + 1}" for i, b in enumerate(test_batches)}
    clips = []
    for batch in sorted(splits, key=natural_key):
        parts = _batch_parts(splits[batch], split_path, batch)
        for part in SPLITS:
            for utt in parts.get(part, []):
                entry = _get(utterances, utt, score_path, "['utterance']")
                ctx = f"['utterance'][{utt!r}]"
                score = _get(entry, "score", score_path, ctx)
                mos = _number(
                    _get(score, "mos", score_path, f"{ctx}['score']"),
                    score_path,
                    f"{ctx}['score']['mos']",
                )
                extra = {
                    k: _number(v, score_path, f"{ctx}['score'][{k!r}]")
                    for k, v in score.items()
                    if k not in ("mos", "judges", "scores") and not isinstance(v, list | dict)
                }
                ratings = _judge_ratings(score, score_path, f"{ctx}['score']")
                if ratings is None:
                    malformed.append(str(utt))
                is_test = part == "test" and batch in test_names
                clips.append(
                    Clip(
                        sample_id=str(utt),
                        path=root / str(_get(entry, "wav", score_path, ctx)),
                        mos=mos,
                        system_id=str(_get(entry, "sys_id", score_path, ctx)),
                        domain=batch,
                        split="test" if is_test else ("train" if part == "test" else part),
                        test_set=test_names[batch] if is_test else None,
                        extra_scores=extra,
                        ratings=ratings or {},
                        song=_song(entry, score_path, ctx),
                    )
                )
    if malformed:
        log.warning(
            "%s: %d utterance(s) have 'judges' and 'scores' lists of different lengths or with "
            "non-numbers (first: %r); their per-judge ratings are ignored",
            score_path,
            len(malformed),
            malformed[0],
        )
    sys_info_path = root / "info" / "sys_info.json"
    # Optional, but read wherever it exists: a FIFO or device in its place is refused, not skipped.
    systems = frozenset(_load_json(sys_info_path)) if sys_info_path.exists() else None
    corpus = Corpus(clips, sorted(splits, key=natural_key), scale, systems)
    return corpus.filter_sample_rate(sample_rate_filter) if sample_rate_filter else corpus


def _song(entry: Mapping, where: Path, ctx: str) -> str | None:
    """An utterance's optional `song` (a string naming the piece it sings); None where absent."""
    song = entry.get("song")
    if song is None:
        return None
    if not isinstance(song, str) or not song:
        raise CorpusError(f"{where}: expected a non-empty string at {ctx}['song'], found {song!r}")
    return song


def _batch_parts(entry: object, where: Path, batch: str) -> dict[str, list]:
    """A split.json batch's utterance IDs by split: `train` required, `valid` and `test` optional.

    Aliases (`dev`, `eval`, ...) are mapped to their split; a batch without validation clips
    has them carved by the data module when the whole corpus has none.
    """
    if not isinstance(entry, Mapping):
        raise CorpusError(f"{where}: expected an object at [{batch!r}], found {type(entry).__name__}")
    parts: dict[str, list] = {}
    for key, ids in entry.items():
        split = canonical_split(str(key), f"{where} [{batch!r}]")
        if not isinstance(ids, list):
            raise CorpusError(f"{where}: expected a list of utterance IDs at [{batch!r}][{key!r}]")
        parts.setdefault(split, []).extend(ids)
    if "train" not in parts:
        raise CorpusError(f"{where}: missing key 'train' at [{batch!r}] (splits: {accepted_split_names()})")
    return parts


def read_vmc24(
    root: str | Path, sample_rate_filter: int | None = None, score_range: Sequence[float] = (1.0, 5.0)
) -> Corpus:
    """Read the SingMOS VMC'24 track 2 layout: sets/{train,val,eval}_mos_list.txt, wav/<id>.wav."""
    scale = rating_scale(score_range)
    root = Path(root)
    clips = []
    for list_name, split in (("train", "train"), ("val", "valid"), ("eval", "test")):
        path = root / "sets" / f"{list_name}_mos_list.txt"
        for lineno, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            parts = line.strip().split(",")
            if len(parts) != 2:
                raise CorpusError(f"{path}:{lineno}: expected '<id>,<score>', found {line!r}")
            sample_id, score = parts[0].removesuffix(".wav"), parts[1]
            fields = sample_id.split("-")
            if len(fields) < 3:
                raise CorpusError(f"{path}:{lineno}: ID {sample_id!r} has no system field (third '-' field)")
            clips.append(
                Clip(
                    sample_id=sample_id,
                    path=root / "wav" / f"{sample_id}.wav",
                    mos=_number(score, path, f"line {lineno} score"),
                    system_id=fields[2],
                    domain="vmc24",
                    split=split,
                    test_set="eval" if split == "test" else None,
                )
            )
    corpus = Corpus(clips, ["vmc24"], scale)
    return corpus.filter_sample_rate(sample_rate_filter) if sample_rate_filter else corpus
