"""The dataset of one split: clips as cropped mono waveforms with their labels and f0 tracks."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from sqa.core.prediction import OVERALL
from sqa.data.audio import DECODED, audio_info, crop_start, load_audio, pad_to
from sqa.data.corpus import Clip, Corpus, CorpusError
from sqa.data.pitch import F0Extractor
from sqa.data.vocal import vocal_part

# Receptive field of the wav2vec2 and log-mel front ends: shorter clips are zero-padded to it.
MIN_SAMPLES = 400


class ClipDataset(Dataset):
    """Clips of one split as mono float waveforms at `sample_rate`, plus their labels.

    Training clips longer than `max_seconds` are cropped at a random offset (a multiple of the
    f0 hop, so the f0 track stays aligned) that depends on the seed, the clip and the epoch (the
    crop policy; `EpochSampler` passes `(index, epoch)` keys); with `crop_from_start` (evaluation
    under `eval_max_seconds`, the paper's protocol) they keep their first `max_seconds` instead.
    With an `f0_extractor`, items carry the clip's f0 track.

    Items carry the labels of `dimensions` (`target`, NaN where the clip has no such score, and
    `mask`); "mos" is the clip's MOS, other names its `extra_scores`. With `judges` (judge name
    -> ID), the dataset holds one item per clip with the mean judge (ID `len(judges)`, the clip's
    mean scores) plus one item per rating (that judge's ID and rating, other dimensions masked),
    and a clip without ratings or with a judge outside `judges` is an error.
    """

    def __init__(
        self,
        clips: Sequence[Clip],
        corpus: Corpus,
        sample_rate: int,
        max_seconds: float | None = None,
        preload: bool = False,
        seed: int = 0,
        f0_extractor: F0Extractor | None = None,
        dimensions: Sequence[str] = (OVERALL,),
        judges: Mapping[str, int] | None = None,
        crop_from_start: bool = False,
        vocal_only: bool = False,
    ) -> None:
        self.clips = list(clips)
        self.vocal_only = vocal_only
        self.crop_from_start = crop_from_start
        self.dimensions = list(dimensions)
        self.mean_judge = len(judges) if judges is not None else None
        # (clip index, judge ID or None for the mean judge, that judge's rating)
        self.items: list[tuple[int, int | None, float | None]] = []
        for i, clip in enumerate(self.clips):
            self.items.append((i, None, None))
            if judges is None:
                continue
            where = f"{clip.path} [{clip.sample_id}]"
            if not clip.ratings:
                raise CorpusError(f"{where}: no per-judge ratings, which training with judges needs")
            for name, rating in sorted(clip.ratings.items()):
                if name not in judges:
                    raise CorpusError(f"{where}: judge {name!r} is not in the training judge index")
                self.items.append((i, judges[name], rating))
        self.f0_extractor = f0_extractor
        self.hop = int(round(sample_rate * f0_extractor.frame_period_ms / 1000)) if f0_extractor else 1
        self.domain_ids = [corpus.domain_index(c.domain) for c in self.clips]
        self.sample_rate = sample_rate
        self.max_samples = int(max_seconds * sample_rate) if max_seconds else None
        self.seed = seed
        self._cache = [self._read(i) for i in range(len(self.clips))] if preload else None

    def __len__(self) -> int:
        return len(self.items)

    def lengths(self) -> list[int]:
        """Samples each item will have at `sample_rate` after the crop, read from file headers."""
        per_clip = []
        for clip in self.clips:
            sr, frames, _ = audio_info(clip.path)
            length = max(frames * self.sample_rate // sr, MIN_SAMPLES)
            per_clip.append(min(length, self.max_samples) if self.max_samples else length)
        return [per_clip[i] for i, _, _ in self.items]

    def _labels(self, clip: Clip, judge: int | None, rating: float | None) -> tuple[list[float], list[bool]]:
        """Targets (NaN where missing) and label mask over `dimensions` for one item."""
        if judge is not None:
            # A judge's rating is of the overall quality only.
            others = len(self.dimensions) - 1
            return [rating] + [math.nan] * others, [True] + [False] * others
        values = [clip.mos if d == OVERALL else clip.extra_scores.get(d, math.nan) for d in self.dimensions]
        return values, [not math.isnan(v) for v in values]

    def _read(self, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        # This process reads through its kept waveforms: the corpus check read the clips already, and
        # every candidate, fold and test pass of a run reads them again. A data loader's worker
        # reads its own files, which nothing after it would reuse.
        worker = torch.utils.data.get_worker_info() is not None
        wav = (load_audio if worker else DECODED.read)(self.clips[index].path, self.sample_rate)
        if self.vocal_only:
            # As scoring trims it; a clip without a vocal frame stays whole, so its label still counts.
            part, _ = vocal_part(wav, self.sample_rate)
            wav = wav if part is None else part
        wav = pad_to(wav, MIN_SAMPLES)
        f0 = self.f0_extractor(wav, self.sample_rate) if self.f0_extractor else None
        return wav, f0

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, Any]:
        index, epoch = key if isinstance(key, tuple) else (key, 0)
        clip_index, judge, rating = self.items[index]
        clip = self.clips[clip_index]
        wav, f0 = self._cache[clip_index] if self._cache is not None else self._read(clip_index)
        # The crop depends only on the seed, the item and the epoch, so a resumed run crops alike.
        rng = np.random.default_rng([self.seed, index, epoch]) if self.max_samples is not None else None
        start = 0 if self.crop_from_start else crop_start(wav.shape[0], self.max_samples, rng, self.hop)
        if self.max_samples is not None:
            wav = wav[start : start + self.max_samples]
            if f0 is not None:
                f0 = f0[start // self.hop : (start + self.max_samples) // self.hop + 1]
        target, mask = self._labels(clip, judge, rating)
        return {
            "index": index,
            "wav": torch.from_numpy(np.ascontiguousarray(wav)),
            "f0": torch.from_numpy(np.ascontiguousarray(f0)) if f0 is not None else None,
            "mos": clip.mos,
            "target": target,
            "mask": mask,
            # Every listener's overall rating (by judge name), for the likelihood losses.
            "ratings": [clip.ratings[name] for name in sorted(clip.ratings)],
            "judge": self.mean_judge if judge is None else judge,
            "domain": self.domain_ids[clip_index],
            "sample_id": clip.sample_id,
            "wav_path": str(clip.path),
            "system_id": clip.system_id,
            "test_set": clip.test_set or "",
            # The piece the clip sings (None where the corpus does not say): same-song pairs.
            "song": clip.song,
        }
