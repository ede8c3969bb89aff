"""The warnings a `Scorer` gives, one class per cause, and the chunked-scoring warning's message.

Named apart from the standard library's `warnings`, which the scoring modules import beside it.
"""

from __future__ import annotations

# The shortest window (seconds) whose chunked scores stayed within 0.02 MOS of whole-clip scores
# on 3-minute varied songs, by backbone class (benchmarks/chunking.py; docs/scoring.md). Shorter
# windows, and backbones not measured, warn when a clip is chunked.
CHUNK_SECONDS_WITHIN_0_02 = {"LogMelBackbone": 10.0, "TorchaudioWav2Vec2": 5.0}


def chunk_warning(backbone: str, chunk_seconds: float) -> str | None:
    """Why chunked scores of `backbone` (a class name) in `chunk_seconds` windows may move, or None."""
    bound = CHUNK_SECONDS_WITHIN_0_02.get(backbone)
    if bound is None:
        return f"chunked scoring of a {backbone} backbone was not measured against whole-clip scoring"
    if chunk_seconds < bound:
        return (
            f"{backbone} windows shorter than {bound:g} s moved scores of long songs by more than 0.02 MOS "
            "against whole-clip scoring (docs/scoring.md); use longer windows where memory allows"
        )
    return None


class LearningWarning(UserWarning):
    """The export's model did not beat the constant training-mean predictor on its own test data."""


class ChunkWarning(UserWarning):
    """Chunked scores of this backbone and window length may differ from whole-clip scores."""


class PreferenceWarning(UserWarning):
    """Preference probabilities use the export's test RMSE (no validation RMSE recorded) or are missing."""


class DomainWarning(UserWarning):
    """A model trained with domain IDs scores as its first domain, because no domain was given."""
