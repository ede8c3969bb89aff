"""DNSMOS P.835 (SIG, BAK, OVRL) and P.808 speech-quality scores: a pretrained, offline baseline.

The ONNX models are the ones the `speechmos` package (MIT, Microsoft) ships inside its wheel:
`dnsmos_models/sig_bak_ovr.onnx` (P.835 SIG/BAK/OVRL from the waveform) and
`dnsmos_models/model_v8.onnx` (P.808 MOS from a log-mel spectrogram). They are read with
`importlib.resources`, so nothing is downloaded. The package's own Python module needs librosa
at import time; only its model files are used here and the thin pre-processing around them is
reimplemented in NumPy with the same numbers as `speechmos.dnsmos` (and the DNS Challenge's
`dnsmos_local.py`): 16 kHz input, 9.01 s windows hopped by 1 s, a 120-band log-mel spectrogram
for P.808, and the published polynomial calibration of the raw SIG/BAK/OVRL outputs.

Files are read by the same loader as `sqa-score`'s (`sqa.scoring.clips.file_batches`), and the
windows of a batch of clips go through the models together (`DNSMOS.score_files`); a clip gets
the scores it gets alone (`DNSMOS.score`).
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from sqa.baselines.files import FileScores, score_files
from sqa.data.audio import load_audio
from sqa.scoring.clips import ClipPreparer

SAMPLE_RATE = 16000
WINDOW_SECONDS = 9.01
WINDOW = 144160  # int(WINDOW_SECONDS * SAMPLE_RATE)
HOP = SAMPLE_RATE
WINDOWS_PER_BATCH = 16
# Files decoded and scored together by `DNSMOS.score_files`.
FILES_PER_BATCH = 8
OUTPUTS = ("ovrl", "sig", "bak", "p808")

# P.808 features (librosa.feature.melspectrogram(n_fft=321, hop_length=160, n_mels=120) in the
# reference): a 321-point periodic Hann window, zero-padded centred frames, power spectrum,
# Slaney-normalised mel filters from 0 Hz to 8 kHz.
N_FFT = 321
MEL_HOP = 160
N_MELS = 120
TOP_DB = 80.0
# Calibration polynomials (highest power first) mapping the raw P.835 outputs to MOS.
POLY_SIG = (-0.08397278, 1.22083953, 0.0052439)
POLY_BAK = (-0.13166888, 1.60915514, -0.39604546)
POLY_OVRL = (-0.06766283, 1.11546468, 0.04602535)

INSTALL_HINT = "DNSMOS needs the optional dependencies: pip install 'sqa[baseline]' (speechmos, onnxruntime)"


def window_starts(length: int) -> list[int]:
    """Start samples of the 9.01 s windows the reference scores in a clip of `length` >= WINDOW samples.

    The reference takes floor(N / 16000) - 9 windows (at least one) hopped by 1 s and computes
    each window's end as int((i + 9.01) * 16000) in floating point; for some i (7, 8, 9, ...)
    that lands one sample short and the reference skips the window. The same windows are kept
    here, so a long clip gets the reference's score.
    """
    count = max(length // SAMPLE_RATE - 9, 1)
    return [i * HOP for i in range(count) if int((i + WINDOW_SECONDS) * SAMPLE_RATE) - i * HOP >= WINDOW]


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz, logarithmic above."""
    hz = np.asarray(hz, dtype=np.float64)
    mel = hz * 3.0 / 200.0
    log_region = hz >= 1000.0
    mel[log_region] = 15.0 + np.log(hz[log_region] / 1000.0) / (np.log(6.4) / 27.0)
    return mel


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    """Inverse of `_hz_to_mel`."""
    hz = mel * 200.0 / 3.0
    log_region = mel >= 15.0
    hz[log_region] = 1000.0 * np.exp(np.log(6.4) / 27.0 * (mel[log_region] - 15.0))
    return hz


def mel_filters() -> np.ndarray:
    """Slaney-normalised triangular mel filters (N_MELS, N_FFT // 2 + 1), as librosa builds them."""
    fft_freqs = np.fft.rfftfreq(N_FFT, d=1.0 / SAMPLE_RATE)
    edges = _mel_to_hz(np.linspace(0.0, _hz_to_mel(np.array([SAMPLE_RATE / 2]))[0], N_MELS + 2))
    ramps = edges[:, None] - fft_freqs[None, :]
    widths = np.diff(edges)
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


def p808_features(segment: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """Log-mel input of the P.808 model for one window (N,) -> (frames, N_MELS), scaled as the reference."""
    padded = np.pad(segment.astype(np.float64), N_FFT // 2)
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::MEL_HOP]
    hann = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)
    power = np.abs(np.fft.rfft(frames * hann, axis=1)) ** 2
    mel = power @ filters.T
    # power_to_db(ref=np.max, amin=1e-10, top_db=80), then the reference's (dB + 40) / 40.
    db = 10.0 * np.log10(np.maximum(mel, 1e-10)) - 10.0 * np.log10(max(mel.max(), 1e-10))
    db = np.maximum(db, db.max() - TOP_DB)
    return ((db + 40.0) / 40.0).astype(np.float32)


class DNSMOS:
    """DNSMOS P.835 / P.808 scorer on the ONNX models bundled with `speechmos` (no download)."""

    def __init__(self) -> None:
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise ImportError(INSTALL_HINT) from err
        try:
            models = importlib.resources.files("speechmos") / "dnsmos_models"
        except ModuleNotFoundError as err:
            raise ImportError(INSTALL_HINT) from err
        cpu = ["CPUExecutionProvider"]
        self._p835 = ort.InferenceSession((models / "sig_bak_ovr.onnx").read_bytes(), providers=cpu)
        self._p808 = ort.InferenceSession((models / "model_v8.onnx").read_bytes(), providers=cpu)
        self._filters = mel_filters()
        # Whole clips at 16 kHz, no padding (short clips are repeated by `score_batch` instead).
        self._prepare = ClipPreparer(SAMPLE_RATE, min_samples=1, chunk_samples=None, f0_extractor=None)

    def score(self, wav: np.ndarray) -> dict[str, float]:
        """Scores of a mono 16 kHz waveform (N,): `sig`, `bak`, `ovrl` (P.835) and `p808`, on a 1-5 scale.

        A clip shorter than one 9.01 s window is repeated end to end (doubled until long enough),
        as the reference does; per-window scores are averaged. Samples are scored as given: the
        reference refuses arrays outside [-1, 1], this scorer does not clip or rescale them.
        """
        return self.score_batch([wav])[0]

    def score_batch(self, wavs: Sequence[np.ndarray]) -> list[dict[str, float]]:
        """Scores of mono 16 kHz waveforms (N,) each, as `score` gives them one by one.

        The windows of all the clips go through the models together, WINDOWS_PER_BATCH at a time:
        a short clip has one to seven, and fuller batches ran 1.2x faster through the P.835 network
        (benchmarks/dnsmos.py). A window's outputs do not depend on its batch (within 3e-7).
        """
        if not wavs:
            return []
        windows: list[np.ndarray] = []
        owners: list[int] = []
        for k, wav in enumerate(wavs):
            wav = np.asarray(wav, dtype=np.float32)
            if wav.ndim != 1 or wav.size == 0:
                raise ValueError(f"DNSMOS scores a non-empty mono waveform (N,), got shape {wav.shape}")
            if not np.isfinite(wav).all():
                raise ValueError("DNSMOS: the waveform holds NaN or infinite samples")
            while wav.size < WINDOW:
                wav = np.concatenate([wav, wav])
            starts = window_starts(wav.size)
            windows.extend(wav[s : s + WINDOW] for s in starts)
            owners.extend([k] * len(starts))
        p835, p808 = self._run(windows)
        clip_of = np.asarray(owners)
        out = []
        for k in range(len(wavs)):
            raw, mos = p835[clip_of == k], p808[clip_of == k]
            out.append(
                {
                    "sig": float(np.polyval(POLY_SIG, raw[:, 0]).mean()),
                    "bak": float(np.polyval(POLY_BAK, raw[:, 1]).mean()),
                    "ovrl": float(np.polyval(POLY_OVRL, raw[:, 2]).mean()),
                    "p808": float(mos.mean()),
                }
            )
        return out

    def _run(self, windows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Raw P.835 outputs (W, 3) and P.808 scores (W,) of 9.01 s windows (WINDOW,), as float64."""
        raw, p808 = [], []
        # Windows go through the models in chunks: one batch of many would hold every window's
        # activations at once.
        for first in range(0, len(windows), WINDOWS_PER_BATCH):
            segments = np.stack(windows[first : first + WINDOWS_PER_BATCH])
            raw.append(self._p835.run(None, {"input_1": segments})[0])
            # The P.808 model sees each window less its last 10 ms (900 mel frames).
            mels = np.stack([p808_features(seg[:-MEL_HOP], self._filters) for seg in segments])
            p808.append(self._p808.run(None, {"input_1": mels})[0][:, 0])
        return np.concatenate(raw).astype(np.float64), np.concatenate(p808).astype(np.float64)

    def score_file(self, path: str | Path) -> dict[str, float]:
        """Scores of an audio file of any rate and channel count (downmixed, resampled to 16 kHz)."""
        return self.score(load_audio(path, SAMPLE_RATE))

    def score_files(
        self, paths: Sequence[str | Path], batch_size: int = FILES_PER_BATCH, num_workers: int = 0
    ) -> Iterator[FileScores]:
        """Scores of audio files, a batch of `batch_size` files at a time (`index`: the position in `paths`).

        Files are read as `sqa-score` reads them (`sqa.scoring.clips.file_batches`: headers
        checked first, then decoded, downmixed and resampled to 16 kHz by `num_workers`
        DataLoader workers in length-sorted batches); each batch is scored by `score_batch`.
        An unreadable file yields its error instead of scores.
        """
        return score_files(self.score_batch, self._prepare, paths, batch_size, num_workers)
