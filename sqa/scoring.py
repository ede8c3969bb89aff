"""Score audio with an exported predictor in length-sorted batches (equal to one-by-one scoring)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sqa.data.audio import AudioError, load_audio, pad_to
from sqa.data.datamodule import pad_batch
from sqa.export import load_export


def resolve_domain(domain: str | int | None, domains: list[str]) -> int:
    """Index of `domain` (a name or an index) in `domains`; None means the first one."""
    if domain is None:
        return 0
    if isinstance(domain, int) or str(domain).isdigit():
        index = int(domain)
        if not 0 <= index < max(len(domains), 1):
            raise ValueError(f"domain index {index} out of range for domains {domains}")
        return index
    if domain not in domains:
        raise ValueError(f"unknown domain {domain!r}; the export knows {domains}")
    return domains.index(domain)


@dataclass(frozen=True)
class ScoreResult:
    """The score of one input, or the reason it could not be scored."""

    path: str
    score: float | None
    error: str | None = None


class Scorer:
    """Loads an export once and scores waveforms or files of any sample rate and channel count.

    A predictor trained with domain IDs scores every clip as coming from `domain` (a domain name
    or index of the export's `domains` list); the default is the first domain of that list
    (annotation batch p1 for SingMOS-Pro).
    """

    def __init__(
        self,
        export_dir: str | Path,
        device: str = "cpu",
        batch_size: int = 8,
        domain: str | int | None = None,
    ) -> None:
        self.predictor, self.config, self.f0_extractor = load_export(export_dir)
        self.domain = resolve_domain(domain, self.config.get("domains", []))
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
            padded = [pad_to(wavs[i], self.min_samples) for i in idx]
            wav, lengths = pad_batch([torch.from_numpy(w) for w in padded])
            f0 = None
            if self.f0_extractor is not None:
                tracks = [torch.from_numpy(self.f0_extractor(w, self.sample_rate)) for w in padded]
                f0 = pad_batch(tracks)[0].to(self.device)
            domain = torch.full((len(idx),), self.domain, device=self.device)
            out = self.predictor(wav.to(self.device), lengths.to(self.device), domain, f0)
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
