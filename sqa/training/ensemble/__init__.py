"""Ensembles of exports: `sqa-ensemble`, the members it joins and ridge weights.

One concept per module:
    command.py  sqa-ensemble and `build_ensemble`: several exports written as one ensemble export
    members.py  the exports that join an ensemble, loaded and checked against each other
    ridge.py    ridge stacking weights fitted on the members' validation predictions

A member or the ensemble is tested on a corpus by eval.py's own test pass
(`sqa.training.evaluation.tested`). The ensemble itself is a predictor like any other
(`sqa.models.ensemble.EnsemblePredictor`), and the default run's candidates
(`sqa.training.candidates`) use it for their ensemble of the best two.
`sqa.training.ensemble` was one module; every public name it had stays importable here.
"""

from sqa.training.ensemble.command import METHODS, build_ensemble, main
from sqa.training.ensemble.members import (
    VALID_SPLIT,
    EnsembleError,
    Member,
    check_members,
    clip_keys,
    member_corpus,
    member_record,
    read_member,
    rebased_data,
    shared_corpus,
)
from sqa.training.ensemble.ridge import DEFAULT_ALPHA, fit_ridge, ridge_weights, validation_corpus
from sqa.training.evaluation import tested

__all__ = [
    "DEFAULT_ALPHA",
    "METHODS",
    "VALID_SPLIT",
    "EnsembleError",
    "Member",
    "build_ensemble",
    "check_members",
    "clip_keys",
    "fit_ridge",
    "main",
    "member_corpus",
    "member_record",
    "read_member",
    "rebased_data",
    "ridge_weights",
    "shared_corpus",
    "tested",
    "validation_corpus",
]
