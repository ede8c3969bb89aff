"""What an export may build: the classes its `_target_`s may name, and where in config.yaml each may stand."""

from __future__ import annotations

from sqa.data.pitch import F0Extractor
from sqa.data.readers import CORPUS_READERS
from sqa.models.aligner import AlignedPredictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.calibrated import CalibratedPredictor
from sqa.models.crepe import CrepeBackbone
from sqa.models.distillmos import DistillMosBackbone, DistillMosZeroShot
from sqa.models.ensemble import EnsemblePredictor
from sqa.models.fusion import FusionBackbone
from sqa.models.interface import Predictor
from sqa.models.predictor import MOSPredictor
from sqa.models.ssl import SSL_BACKBONES
from sqa.models.uncertainty import UncertainMOSPredictor

# The classes an export may build, by the `_target_` each writes (see sqa.models.config).
BACKBONE_CLASSES = (LogMelBackbone, DistillMosBackbone, CrepeBackbone, *SSL_BACKBONES)
# The predictor families (`sqa.models.interface.Predictor`) an export or an ensemble member may
# name: MOSPredictor, its uncertainty and aligner families, Distill-MOS with its own head
# (zero-shot) and that head calibrated onto a corpus.
PREDICTOR_CLASSES: tuple[type[Predictor], ...] = (
    MOSPredictor,
    UncertainMOSPredictor,
    AlignedPredictor,
    DistillMosZeroShot,
    CalibratedPredictor,
)
PREDICTOR_TARGETS = frozenset(cls.export_target() for cls in PREDICTOR_CLASSES)
ENSEMBLE_TARGET = EnsemblePredictor.export_target()
BACKBONE_TARGETS = frozenset(cls.export_target() for cls in BACKBONE_CLASSES)
# A fusion stands where a backbone does; its two parts are plain backbones, so nesting stops there.
FUSION_TARGET = FusionBackbone.export_target()
F0_TARGET = "sqa.data.pitch.F0Extractor"
CONSTRUCTORS: dict[str, type] = {
    **{cls.export_target(): cls for cls in PREDICTOR_CLASSES},
    ENSEMBLE_TARGET: EnsemblePredictor,
    FUSION_TARGET: FusionBackbone,
    F0_TARGET: F0Extractor,
    **{cls.export_target(): cls for cls in BACKBONE_CLASSES},
}
ALLOWED_TARGETS = frozenset(CONSTRUCTORS)
# Stands for any index of an ensemble's `model.members` list in TARGET_PLACES.
MEMBER = "*"
# Where a `_target_` may stand in config.yaml, and which classes it may name there.
TARGET_PLACES = {
    ("model",): PREDICTOR_TARGETS | {ENSEMBLE_TARGET},
    ("model", "backbone"): BACKBONE_TARGETS | {FUSION_TARGET},
    **{("model", "backbone", part): BACKBONE_TARGETS for part in FusionBackbone.exported_children},
    ("model", "members", MEMBER): PREDICTOR_TARGETS,
    ("model", "members", MEMBER, "backbone"): BACKBONE_TARGETS | {FUSION_TARGET},
    **{
        ("model", "members", MEMBER, "backbone", part): BACKBONE_TARGETS
        for part in FusionBackbone.exported_children
    },
    ("f0",): frozenset({F0_TARGET}),
    # The corpus a run was tested on, for `eval.py`; never built by `load_export`, and
    # `sqa.data.readers.recorded_corpus` checks it again before reading it.
    ("data", "corpus"): CORPUS_READERS,
}


def _place(keys: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """`keys` with the index of an ensemble member (`model.members[2]`) as MEMBER: its TARGET_PLACES key."""
    if keys[:2] == ("model", "members") and len(keys) > 2 and isinstance(keys[2], int):
        return (*keys[:2], MEMBER, *keys[3:])
    return keys


def _constructor(target: str) -> type:
    """The class an allowed `_target_` names (callers have checked it against ALLOWED_TARGETS)."""
    return CONSTRUCTORS[target]
