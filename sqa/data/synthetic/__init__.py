"""The built-in synthetic singing corpora: MOS-rated in the SingMOS-Pro layout, and MUSHRA-style.

Everything is deterministic from the seed. Configs and exports name the loaders by this package,
`sqa.data.synthetic.load_synthetic` and `sqa.data.synthetic.load_synthetic_mushra`.

One concept per module (how clips are sung and degraded: `sqa.data.singing`):
    mos.py        the MOS corpus: batches, systems, clip layout, audio and ratings; its loader
    labels.py     its labels beyond the overall MOS: lyrics and melody MOS, judges
    signature.py  the record of a generated corpus's settings, checked before it is reused
    mushra.py     the same clips rated 0-100 as a MUSHRA-style listening test
"""

from __future__ import annotations

from sqa.data.synthetic.labels import (
    JUDGE_LENIENCY_STD,
    JUDGE_ORDER_NOISE,
    JUDGE_STREAM,
    JUDGES_PER_BATCH,
    LABEL_STREAM,
    PITCH_KINDS,
    SPECTRAL_KINDS,
)
from sqa.data.synthetic.mos import (
    BATCHES,
    CLIP_COUNT_SPREAD,
    DIMENSION_BATCHES,
    LAYOUT_STREAM,
    LONG_SECONDS,
    TEST_BATCHES,
    generate,
    load_synthetic,
)
from sqa.data.synthetic.mushra import (
    MUSHRA_BIAS_STD,
    MUSHRA_COLUMNS,
    MUSHRA_FORMAT_VERSION,
    MUSHRA_LISTENERS,
    MUSHRA_LISTENERS_PER_CLIP,
    MUSHRA_MANIFEST,
    MUSHRA_NOISE_STD,
    MUSHRA_RANGE,
    MUSHRA_REPLICATE_SHARE,
    MUSHRA_STREAM,
    load_synthetic_mushra,
)
from sqa.data.synthetic.signature import FORMAT_VERSION

# The paths that configs, exports and users' code name: each stays `sqa.data.synthetic.<name>`.
__all__ = [
    "BATCHES",
    "CLIP_COUNT_SPREAD",
    "DIMENSION_BATCHES",
    "FORMAT_VERSION",
    "JUDGES_PER_BATCH",
    "JUDGE_LENIENCY_STD",
    "JUDGE_ORDER_NOISE",
    "JUDGE_STREAM",
    "LABEL_STREAM",
    "LAYOUT_STREAM",
    "LONG_SECONDS",
    "MUSHRA_BIAS_STD",
    "MUSHRA_COLUMNS",
    "MUSHRA_FORMAT_VERSION",
    "MUSHRA_LISTENERS",
    "MUSHRA_LISTENERS_PER_CLIP",
    "MUSHRA_MANIFEST",
    "MUSHRA_NOISE_STD",
    "MUSHRA_RANGE",
    "MUSHRA_REPLICATE_SHARE",
    "MUSHRA_STREAM",
    "PITCH_KINDS",
    "SPECTRAL_KINDS",
    "TEST_BATCHES",
    "generate",
    "load_synthetic",
    "load_synthetic_mushra",
]
