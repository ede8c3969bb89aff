"""Score audio with an exported predictor in length-sorted batches (equal to one-by-one scoring)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
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
    """The overall score of one input and its other dimensions' scores, or why it failed."""

    path: str
    score: float | None
    error: str | None = None
    dimension_scores: Mapping[str, float] = field(default_factory=dict)


class Scorer:
    """Loads an export once and scores waveforms or files of any sample rate and channel count.

    A predictor trained with domain IDs scores every clip as coming from `domain` (a domain name
    or index of the export's `domains` list); the default is the first domain of that list
    (annotation batch p1 for SingMOS-Pro). A predictor trained with judges scores as its mean
    judge. `dimensions` are the export's score dimensions, the overall "mos" first.
    """

    def __init__(
        self,
        export_dir: str | Path,
        device: str = "cpu",
        batch_size: int = 8,
        domain: str | int | None = None,
    ) -> None:
        self.predictor, self.config, self.f0_extractor = load_export(export_dir)
        self.dimensions = list(self.predictor.dimensions)
        self.domain = resolve_domain(domain, self.config.get("domains", []))
        self.device = torch.device(device)
        self.predictor.to(self.device)
        self.sample_rate = int(self.config["sample_rate"])
        self.min_samples = int(self.predictor.backbone.min_samples)
        self.batch_size = batch_size

    def score_waveforms(self, wavs: list[np.ndarray]) -> list[float]:
        """Overall scores of mono float waveforms (N,) at `sample_rate`, scored whole, in order."""
        return [row[0] for row in self.score_dimensions(wavs)]

    @torch.inference_mode()
    def score_dimensions(self, wavs: list[np.ndarray]) -> list[list[float]]:
        """Scores of every dimension (one list of K per waveform), scored whole, in order."""
        order = sorted(range(len(wavs)), key=lambda i: wavs[i].shape[0])
        scores: list[list[float]] = [[] for _ in wavs]
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
            for i, s in zip(idx, out.scores.float().cpu().tolist(), strict=True):
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
        scores = self.score_dimensions([wav for _, wav in pending])
        for (path, _), row in zip(pending, scores, strict=True):
            extra = dict(zip(self.dimensions[1:], row[1:], strict=True))
            yield ScoreResult(path, row[0], dimension_scores=extra)
