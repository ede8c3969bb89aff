"""The synthetic corpus's labels beyond the overall MOS: lyrics and melody MOS, and judges.

The clips of some batches (`DIMENSION_BATCHES`) carry lyrics and melody MOS driven by different
degradations: melody by the pitch errors, lyrics by the spectral ones (noise, band limit, bit
depth) that cost intelligibility. The five ratings of each clip are by five judges drawn from a
pool per batch, each judge with a leniency of its own. These labels come from random streams of
their own, so the audio and the overall MOS are those that the corpus had before it had them.
"""

from __future__ import annotations

import numpy as np

from sqa.data.singing import SystemRecipe

PITCH_KINDS = frozenset({"detune", "drift", "jitter", "note_detune"})
SPECTRAL_KINDS = frozenset({"noise", "lowpass", "bits"})
# Judges per batch pool; the spread of their leniencies and of the noise in ordering by it.
JUDGES_PER_BATCH = 12
JUDGE_LENIENCY_STD = 0.5
JUDGE_ORDER_NOISE = 0.3
# Keys of the random streams of the labels added after format 3, apart from the audio's streams.
LABEL_STREAM, JUDGE_STREAM = 1, 2


def dimension_quality(recipe: SystemRecipe) -> dict[str, float]:
    """Latent lyrics and melody quality of a system: each hurt only by its own degradations."""
    severity = 4.6 - recipe.quality
    if recipe.kind in PITCH_KINDS:
        return {"lyrics": 4.5, "melody": 4.6 - 1.2 * severity}
    if recipe.kind in SPECTRAL_KINDS:
        return {"lyrics": 4.6 - 1.1 * severity, "melody": 4.5}
    return {"lyrics": 4.6, "melody": 4.6}


def assign_judges(
    rng: np.random.Generator, ratings: list[int], pool: list[str], leniency: np.ndarray
) -> tuple[list[str], list[int]]:
    """Five judges of the pool for a clip's ratings, the more lenient ones on the higher ratings.

    The clip's ratings (hence its MOS) stay as drawn; only who gave which one follows the
    judges' leniency (with noise), so a judge's ratings deviate from the clip means by its bias.
    """
    chosen = rng.choice(len(pool), size=len(ratings), replace=False)
    order = np.argsort(leniency[chosen] + rng.normal(0, JUDGE_ORDER_NOISE, len(chosen)), kind="stable")
    by_rank = sorted(ratings)
    given = [0] * len(ratings)
    for rank, position in enumerate(order):
        given[int(position)] = by_rank[rank]
    return [pool[int(j)] for j in chosen], given
