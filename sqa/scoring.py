"""Score audio with an exported predictor in length-sorted batches (equal to one-by-one scoring)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sqa.data.audio import AudioError, fit_length, load_audio
from sqa.data.datamodule import collate
from sqa.export import load_export


@dataclass(frozen=True)
class ScoreResult:
    """The score of one input, or the reason it could not be scored."""

    path: str
    score: float | None
    error: str | None = None


class Scorer:
    """Loads an export once and scores waveforms or files of any sample rate and channel count."""

    def __init__(self, export_dir: str | Path, device: str = "cpu", batch_size: int = 8) -> None:
        self.predictor, self.config = load_export(export_dir)
        self.device = torch.device(device)
        self.predictor.to(self.device)
        self.sample_rate = int(self.config["sample_rate"])
        self.min_samples = int(self.predictor.backbone.min_samples)
        self.batch_size = batch_size

    @torch.inference_mode()
    def score_waveforms(self, wavs: list[np.ndarray]) -> list[float]:
        """Scores of mono float waveforms (N,) at `sample_rate`, scored whole; order preserved."""
        order = sorted(range(len(wavs)), key=lambda i: wavs[i].shape[0])
        scores = [0.0] * len(wavs)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            batch = collate(
                [
                    {
                        "wav": torch.from_numpy(fit_length(wavs[i], self.min_samples, None, None)),
                        "mos": 0.0,
                        "domain": 0,
                        "sample_id": "",
                        "system_id": "",
                        "test_set": "",
                    }
                    for i in idx
                ]
            )
            out = self.predictor(batch["wav"].to(self.device), batch["lengths"].to(self.device))
            for i, s in zip(idx, out.score.float().cpu().tolist(), strict=True):
                scores[i] = s
        return scores

    def score_files(self, paths: Iterable[str | Path], group: int = 256) -> Iterator[ScoreResult]:
        """Score files in groups of `group`; unreadable files yield a result with `error` set."""
        pending: list[tuple[str, np.ndarray]] = []
        for path in paths:
            try:
                pending.append((str(path), load_audio(path, self.sample_rate)))
            except AudioError as err:
                yield ScoreResult(str(path), None, str(err))
                continue
            if len(pending) >= group:
                yield from self._flush(pending)
                pending = []
        yield from self._flush(pending)

    def _flush(self, pending: list[tuple[str, np.ndarray]]) -> Iterator[ScoreResult]:
        scores = self.score_waveforms([wav for _, wav in pending])
        for (path, _), score in zip(pending, scores, strict=True):
            yield ScoreResult(path, score)
