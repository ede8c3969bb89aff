"""Modules split into sibling modules keep every public path they had, and keep their classes.

`sqa.scoring.scorer`, `sqa.scoring.cli`, `sqa.reports.compare`, `sqa.models.distillmos`,
`sqa.core.run_folder`, `sqa.exports.importers`, `sqa.models.ssl.interop`, `sqa.baselines.cli`
and `sqa.training`'s run, ensemble, callbacks, run_outputs and lit_module each had a part moved
into modules of their own; users' code, exports, configs and checkpoints (callback state keys)
still name the old paths, so each module imports its moved names back and lists every public
name in `__all__`, and the classes they name by module stay where they are.
"""

from __future__ import annotations

import importlib

import pytest
from hydra.utils import get_object

from sqa.core.renames import current

# Every public name of each module before the split (scorer's ClipWarning: imported from clips).
NAMES = {
    "sqa.scoring.scorer": (
        "CHUNK_SECONDS_WITHIN_0_02",
        "MEAN_DOMAIN",
        "ChunkWarning",
        "ClipWarning",
        "DomainWarning",
        "LearningWarning",
        "PreferenceWarning",
        "ScoreResult",
        "Scorer",
        "SpreadScore",
        "chunk_warning",
        "default_domain_note",
        "resolve_device",
        "resolve_domain",
    ),
    "sqa.scoring.cli": ("default_workers", "main"),
    "sqa.reports.compare": (
        "SAME_CLIPS",
        "SEED_NOTE",
        "TIES_NOTE",
        "UNDEFINED_COMPARISON",
        "align",
        "compare",
        "compare_groups",
        "format_comparison",
        "main",
        "parse_args",
        "read_predictions",
        "run_labels",
        "summarise",
        "welch",
    ),
    "sqa.models.distillmos": (
        "COMPRESSION",
        "CROP_HOP",
        "DistillMosBackbone",
        "DistillMosConfig",
        "DistillMosZeroShot",
        "FrozenBatchNorm",
        "SAMPLE_RATE",
        "SEGMENT",
        "SEGMENTS_PER_PASS",
        "SEGMENT_FRAMES",
        "STFT_HOP",
        "STFT_WINDOW",
        "SpectrogramCNN",
        "WEIGHTS",
        "ZeroShotConfig",
        "backbone_state",
        "cnn_channels",
        "compressed_spectrogram",
        "crop_starts",
        "cut_segments",
        "package_state_dict",
        "package_weights_path",
        "segment_starts",
        "sinusoidal_positions",
        "zero_shot_predictor",
    ),
    "sqa.training.run": (
        "ARCHITECTURES",
        "HEAD_INITS",
        "NoCheckpointError",
        "RunResult",
        "RunSettings",
        "build",
        "check_resumable",
        "init_from",
        "log_interval",
        "run",
        "train",
        "train_means",
    ),
    "sqa.training.ensemble": (
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
    ),
    "sqa.training.callbacks": (
        "AtomicCheckpointIO",
        "CHECKPOINTS",
        "MetricHistory",
        "ParameterSummary",
        "REQUIRED",
        "SELECTION_WATCHERS",
        "SelectionCheckpoint",
        "SelectionEarlyStopping",
        "StartedOver",
        "ValidationLog",
        "checkpoint_step",
        "instantiate_callbacks",
        "logged_tiebreak",
        "progress_bar",
        "summary_table",
    ),
    "sqa.training.run_outputs": (
        "RECORDED_PACKAGES",
        "corpus_name",
        "corpus_summary",
        "curve_set_names",
        "describe_objective",
        "hparam_metrics",
        "learning_check",
        "log_figures",
        "log_hparams",
        "objective_record",
        "recorded_data",
        "report_selection",
        "run_info",
        "run_sigma",
        "scale_shift",
        "shift_record",
        "training_end",
        "write_test_outputs",
    ),
    "sqa.training.lit_module": ("LossFn", "MOSModule", "OptimizerFactory", "labelled"),
    "sqa.exports.importers": (
        "KINDS",
        "SAMPLE_RATE",
        "SHEET_SSL",
        "SINGMOS_PRO_DEFAULT_DOMAIN",
        "SINGMOS_SSL",
        "SINGMOS_UPSTREAMS",
        "SOURCE_POOLING",
        "Converted",
        "LayoutError",
        "build_predictor",
        "convert_sheet",
        "convert_singmos_pro",
        "convert_singmos_v1",
        "import_predictor",
        "main",
        "read_sheet_config",
        "read_weights",
    ),
    "sqa.models.ssl.interop": (
        "MAX_CONV_LAYERS",
        "conv_layers",
        "convert_fairseq_state_dict",
        "existing",
        "fairseq_task_normalize",
        "load_fairseq2_checkpoint",
        "load_torch_file",
        "load_torchaudio_checkpoint",
        "load_transformers_dir",
        "load_weights_into",
        "patch_torchaudio_for_s3prl",
        "read_s3prl_checkpoint",
        "s3prl_cached_checkpoint",
        "s3prl_checkpoint_url",
        "s3prl_configs",
        "s3prl_upstream_names",
        "transformers_do_normalize",
    ),
    "sqa.baselines.cli": (
        "BASELINES",
        "BASELINE_RANGE",
        "CORPORA",
        "DEFAULT_RATE_FILTER",
        "OPTIONS",
        "Baseline",
        "BaselineModel",
        "evaluate_on_scale",
        "main",
        "read_corpus",
        "run_info",
        "score_clips",
        "score_corpus",
    ),
    "sqa.core.run_folder": (
        "HYDRA",
        "LINK_REFUSED",
        "LOCK_NAME",
        "LOG_NAME",
        "OUTPUTS",
        "PREVIOUS",
        "REWRITTEN",
        "RUN_NAMES",
        "Options",
        "RunDirError",
        "claimed",
        "discard_previous",
        "lock",
        "missing_folders",
        "open_no_follow",
        "prepare",
        "previous_outputs",
        "record_point",
        "remove_unused",
        "restore_previous",
    ),
}
# Classes whose dotted path configs and exports write (`_target_`): they never leave their module.
TARGETS = (
    "sqa.scoring.scorer.Scorer",
    "sqa.models.distillmos.DistillMosBackbone",
    "sqa.models.distillmos.DistillMosZeroShot",
    "sqa.models.distillmos.DistillMosConfig",
    "sqa.models.distillmos.ZeroShotConfig",
    "sqa.training.callbacks.MetricHistory",
    "sqa.training.callbacks.ParameterSummary",
    "sqa.training.callbacks.SelectionCheckpoint",
    "sqa.training.callbacks.SelectionEarlyStopping",
    "sqa.training.callbacks.StartedOver",
    "sqa.training.callbacks.ValidationLog",
    "sqa.training.lit_module.MOSModule",
)


@pytest.mark.parametrize("path", [f"{module}.{name}" for module, names in NAMES.items() for name in names])
def test_every_public_path_of_the_split_modules_is_current_and_resolves(path: str) -> None:
    assert current(path) == path  # not an old path: nothing rewrites it
    assert get_object(path) is not None


@pytest.mark.parametrize("module", sorted(NAMES))
def test_each_split_module_exports_exactly_its_old_names(module: str) -> None:
    assert sorted(importlib.import_module(module).__all__) == sorted(NAMES[module])


@pytest.mark.parametrize("path", TARGETS)
def test_the_classes_that_configs_name_stay_in_their_module(path: str) -> None:
    module, name = path.rsplit(".", 1)
    assert get_object(path).__module__ == module
    assert get_object(path).__qualname__ == name


# `run` itself is the exception that predates the split: sqa.training.run is the module.
@pytest.mark.parametrize("name", [n for n in NAMES["sqa.training.run"] if n != "run"])
def test_no_new_module_takes_the_old_flat_path_of_a_run_object(name: str) -> None:
    # `sqa.training` was today's sqa.training.run: `sqa.training.<name>` must still map there, which
    # a module sqa/training/<name>.py would prevent (sqa.core.renames.current keeps module paths).
    assert current(f"sqa.training.{name}") == f"sqa.training.run.{name}"
