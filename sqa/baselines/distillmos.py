"""Distill-MOS zero-shot speech-quality scores: a pretrained, offline baseline.

The network and its weights (`distillmos/weights/distill_mos_v7.pt`; MIT, Microsoft) come inside
the `distillmos` wheel, so nothing is downloaded. Each clip is scored at 16 kHz by the package's
own model and forward (`distillmos.ConvTransformerSQAModel`: 7.68 s crops at most 1 s apart,
their scores averaged), on a 1-5 scale: the baseline is the package itself. sqa's own
reproduction of the network (`sqa.models.distillmos`, the `distillmos` backbone and its zero-shot
export for `sqa-score`) gives the same scores within 1e-4 (tests/models/test_distillmos_reference.py).

Files are read by the same loader as `sqa-score`'s (`sqa.baselines.files.score_files`). The
package's forward crops a whole batch by the batch's length, so only clips of one length go
through it together, unpadded: a clip gets the score it gets alone.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from sqa.baselines.files import FileScores, score_files
from sqa.data.audio import load_audio
from sqa.scoring.clips import ClipPreparer

SAMPLE_RATE = 16000
# Distill-MOS gives one score.
OUTPUTS = ("mos",)
# Files decoded and scored together by `DistillMOS.score_files`.
FILES_PER_BATCH = 8
INSTALL_HINT = "Distill-MOS needs the optional dependency: pip install 'sqa[distillmos]' (distillmos)"


class DistillMOS:
    """Distill-MOS scorer on the `distillmos` package's own model and weights (no download)."""

    def __init__(self) -> None:
        try:
            import distillmos
        except ImportError as err:
            raise ImportError(INSTALL_HINT) from err
        # The package prints where it loaded its weights from; the command prints its table only.
        with contextlib.redirect_stdout(io.StringIO()):
            self._model = distillmos.ConvTransformerSQAModel().eval()
        # Whole clips at 16 kHz, no padding (the package pads short clips itself).
        self._prepare = ClipPreparer(SAMPLE_RATE, min_samples=1, chunk_samples=None, f0_extractor=None)

    def score(self, wav: np.ndarray) -> dict[str, float]:
        """Score of a mono 16 kHz waveform (N,): `mos`, on a 1-5 scale."""
        return self.score_batch([wav])[0]

    @torch.inference_mode()
    def score_batch(self, wavs: Sequence[np.ndarray]) -> list[dict[str, float]]:
        """Scores of mono 16 kHz waveforms (N,) each, as `score` gives them one by one.

        Clips of equal length go through the package's forward as one batch (it crops each clip
        alike, and its network treats each crop on its own); no clip is padded.
        """
        arrays = []
        for wav in wavs:
            wav = np.asarray(wav, dtype=np.float32)
            if wav.ndim != 1 or wav.size == 0:
                raise ValueError(f"Distill-MOS scores a non-empty mono waveform (N,), got shape {wav.shape}")
            if not np.isfinite(wav).all():
                raise ValueError("Distill-MOS: the waveform holds NaN or infinite samples")
            arrays.append(wav)
        scores = [0.0] * len(arrays)
        for length in sorted({a.size for a in arrays}):
            rows = [k for k, a in enumerate(arrays) if a.size == length]
            out = self._model(torch.from_numpy(np.stack([arrays[k] for k in rows]))).flatten()
            for k, value in zip(rows, out.tolist(), strict=True):
                scores[k] = float(value)
        return [{"mos": value} for value in scores]

    def score_file(self, path: str | Path) -> dict[str, float]:
        """Score of an audio file of any rate and channel count (downmixed, resampled to 16 kHz)."""
        return self.score(load_audio(path, SAMPLE_RATE))

    def score_files(
        self, paths: Sequence[str | Path], batch_size: int = FILES_PER_BATCH, num_workers: int = 0
    ) -> Iterator[FileScores]:
        """Scores of audio files, `batch_size` files at a time (`index`: the position in `paths`).

        Read as `sqa-score` reads them, by `num_workers` DataLoader workers; an unreadable file
        yields its error instead of scores.
        """
        return score_files(self.score_batch, self._prepare, paths, batch_size, num_workers)
