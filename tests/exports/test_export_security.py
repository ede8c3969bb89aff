"""Hostile exports: each is refused with a message naming the file and key, and nothing runs.

Every payload, if it ran, would create `marker`; `test_the_payload_is_live` shows it does when
unpickled, so the marker's absence after a refusal means the payload never ran.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from sqa.exports import model_card
from sqa.exports.config import _accepted_types, build_node, read_bounded, read_export_config
from sqa.exports.format import (
    ExportError,
    export_predictor,
    load_export,
    read_weights,
    regular_file,
    resolve_export,
)
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.scoring import cli as score


class Payload:
    """Unpickling this creates the file `path` (what a real attack would replace with a shell)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.path, "w"))


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PAYLOAD_RAN"


@pytest.fixture
def payload_file(tmp_path: Path, marker: Path) -> Path:
    path = tmp_path / "payload.pkl"
    path.write_bytes(pickle.dumps(Payload(marker)))
    return path


def small_predictor(n_mels: int = 16) -> MOSPredictor:
    torch.manual_seed(0)
    return MOSPredictor(LogMelBackbone(n_mels=n_mels, channels=8)).eval()


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return export_predictor(small_predictor(), tmp_path / "exp", 16000, ["a"], metrics={"x": 1})


def edit_config(export: Path, change) -> None:
    path = export / "config.yaml"
    config = yaml.safe_load(path.read_text())
    change(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def assert_refused(path: Path, marker: Path, *fragments: str) -> str:
    with pytest.raises(ExportError) as info:
        load_export(path)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert not marker.exists(), "the payload ran"
    return message


def test_the_payload_is_live(payload_file, marker):
    pickle.loads(payload_file.read_bytes())
    assert marker.exists()


def test_an_untouched_export_loads(export, marker):
    predictor, config, f0 = load_export(export)
    assert config["sample_rate"] == 16000 and f0 is None and not predictor.training


# A call of torch.load that unpickles the payload, written as a Hydra node.
def torch_load_node(path: Path) -> dict:
    return {"_target_": "torch.load", "f": str(path), "weights_only": False}


FUSION = "sqa.models.fusion.FusionBackbone"


def fused(second: dict, **first: Any):
    """A change making the export's backbone a fusion of its log-mel (updated by `first`) and `second`."""

    def change(config: dict) -> None:
        logmel = config["model"]["backbone"]
        config["model"]["backbone"] = {"_target_": FUSION, "first": {**logmel, **first}, "second": second}

    return change


HOSTILE_CONFIGS = {
    # The hole this suite was written for: a resolver hiding a target from the allow-list.
    "oc_create_interpolation": (
        lambda c, p: c["model"]["backbone"].update(
            n_mels=f"${{oc.create:{{_target_: torch.load, _args_: [{p}], weights_only: false}}}}"
        ),
        "model.backbone.n_mels holds an interpolation",
    ),
    "interpolation_in_a_list": (lambda c, p: c.update(domains=["a", "${oc.env:HOME}"]), "domains[1]"),
    "interpolation_in_a_key": (lambda c, p: c["model"].update({"${oc.env:HOME}": 1}), "interpolation"),
    "interpolation_in_an_unused_key": (
        lambda c, p: c.update(notes={"deep": [{"x": "${oc.create:{_target_: os.system}}"}]}),
        "notes.deep[0].x holds an interpolation",
    ),
    "target_nested_in_an_argument": (
        lambda c, p: c["model"].update(head_dim=torch_load_node(p)),
        "model.head_dim._target_: a _target_ is only allowed at",
    ),
    "target_in_a_list": (
        lambda c, p: c.update(domains=[{"_target_": "builtins.open", "_args_": [str(p), "w"]}]),
        "domains[0]._target_: a _target_ is only allowed at",
    ),
    "foreign_backbone_target": (
        lambda c, p: c["model"].update(backbone=torch_load_node(p)),
        "model.backbone._target_: refusing to build 'torch.load'",
    ),
    "foreign_model_target": (
        lambda c, p: c["model"].update(_target_="os.system"),
        "model._target_: refusing to build 'os.system'",
    ),
    "sqa_class_in_the_wrong_place": (
        lambda c, p: c.update(f0={"_target_": "sqa.models.predictor.MOSPredictor"}),
        "f0._target_: refusing to build 'sqa.models.predictor.MOSPredictor'",
    ),
    "args_key": (lambda c, p: c["model"].update(_args_=[str(p)]), "model._args_: special key '_args_'"),
    "partial_key": (
        lambda c, p: c["model"]["backbone"].update(_partial_=True),
        "model.backbone._partial_: special key",
    ),
    "recursive_key_deep": (
        lambda c, p: c.update(extra=[{"_recursive_": False}]),
        "extra[0]._recursive_: special key",
    ),
    "checkpoint_path_outside_the_folder": (
        lambda c, p: c["model"]["backbone"].update(checkpoint=str(p)),
        "model.backbone.checkpoint: an export never names files",
    ),
    "f0_cache_dir_writes_outside": (
        lambda c, p: c.update(f0={"_target_": "sqa.data.pitch.F0Extractor", "cache_dir": str(p.parent)}),
        "f0.cache_dir: an export never names files",
    ),
    "unknown_argument": (lambda c, p: c["model"]["backbone"].update(nope=1), "has no argument 'nope'"),
    "wrong_type": (
        lambda c, p: c["model"]["backbone"].update(n_mels="16"),
        "model.backbone.n_mels must be int",
    ),
    "newer_format": (lambda c, p: c.update(format=2), "format is 2"),
    "no_backbone": (lambda c, p: c["model"].pop("backbone"), "model.backbone must be a mapping"),
    # A fusion's parts are checked as backbones are, and a fusion never holds a fusion.
    "foreign_fusion_part_target": (
        lambda c, p: fused(torch_load_node(p))(c),
        "model.backbone.second._target_: refusing to build 'torch.load'",
    ),
    "fusion_inside_a_fusion": (
        lambda c, p: fused({"_target_": FUSION, "first": {}, "second": {}})(c),
        f"model.backbone.second._target_: refusing to build '{FUSION}'",
    ),
    "fusion_part_without_a_target": (
        lambda c, p: fused({"n_mels": 16})(c),
        "model.backbone.second must be a mapping with a _target_",
    ),
    "fusion_part_naming_a_file": (
        lambda c, p: fused({"_target_": "sqa.models.ssl.TorchaudioWav2Vec2", "checkpoint": str(p)})(c),
        "model.backbone.second.checkpoint: an export never names files",
    ),
    "fusion_part_unknown_argument": (
        lambda c, p: fused({"_target_": "sqa.models.backbone.LogMelBackbone"}, nope=1)(c),
        "model.backbone.first.nope: sqa.models.backbone.LogMelBackbone has no argument 'nope'",
    ),
    "fusion_part_huge_size": (
        lambda c, p: fused({"_target_": "sqa.models.backbone.LogMelBackbone"}, n_mels=1_000_000)(c),
        "model.backbone.first.n_mels is 1000000; an export's sizes are at most",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_CONFIGS))
def test_hostile_config_is_refused_before_anything_is_built(case, export, payload_file, marker, monkeypatch):
    change, expected = HOSTILE_CONFIGS[case]
    edit_config(export, lambda c: change(c, payload_file))
    monkeypatch.setattr(
        "sqa.exports.config.build_node", lambda *a: pytest.fail("built before the config was checked")
    )
    message = assert_refused(export, marker, expected)
    assert message.startswith(str(export.resolve() / "config.yaml"))


HOSTILE_YAML = {
    "python_tag": ("model: !!python/object/apply:builtins.open ['{marker}', 'w']\n", "not a plain YAML file"),
    "python_name_tag": ("model: !!python/name:os.system\n", "not a plain YAML file"),
    "alias_bomb": (
        "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n",
        "aliases",
    ),
    "broken": ("format: 1\nmodel: {_target_: [unclosed\n", "not a plain YAML file"),
    "deep_nesting": ("x: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
    "empty": ("", "expected a mapping at the top level, got NoneType"),
    "a_list": ("- 1\n- 2\n", "expected a mapping at the top level, got list"),
    "timestamp": ("format: 1\nsample_rate: 2001-12-14\n", "sample_rate: unsupported value of type date"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_YAML))
def test_hostile_yaml_text_is_refused(case, export, marker):
    text, expected = HOSTILE_YAML[case]
    (export / "config.yaml").write_text(text.replace("{marker}", str(marker)))
    assert_refused(export, marker, "config.yaml", expected)


def test_pickle_in_config_yaml_is_refused(export, marker):
    (export / "config.yaml").write_bytes(pickle.dumps(Payload(marker)))
    assert_refused(export, marker, "config.yaml: not UTF-8 text")


def test_pickle_payload_in_model_pt_is_refused(export, marker):
    torch.save({"w": Payload(marker)}, export / "model.pt")
    assert_refused(export, marker, "model.pt: not a plain tensor state_dict")
    (export / "model.pt").write_bytes(pickle.dumps(Payload(marker)))  # legacy, non-zip format
    assert_refused(export, marker, "model.pt: not a plain tensor state_dict")


@pytest.mark.parametrize("name", ["metrics.json", "metrics_lyrics.json", "run_info.json", "README.md"])
def test_pickle_in_any_other_file_is_refused(name, export, marker):
    (export / name).write_bytes(pickle.dumps(Payload(marker)))
    assert_refused(export, marker, name)


def test_non_tensor_weights_are_refused(export, marker):
    torch.save({"head.0.weight": 1.0}, export / "model.pt")
    assert_refused(export, marker, "model.pt: expected a mapping of parameter names to tensors")


def test_shape_mismatch_names_the_parameter(export, marker):
    torch.save(small_predictor(n_mels=32).state_dict(), export / "model.pt")
    assert_refused(export, marker, "model.pt: 'backbone.convs.0.weight' has shape (8, 32, 5)", "(8, 16, 5)")


def test_missing_and_unexpected_weights_are_named(export, marker):
    state = small_predictor().state_dict()
    state["extra"] = state.pop("head.3.bias")
    torch.save(state, export / "model.pt")
    assert_refused(export, marker, "missing ['head.3.bias']", "unexpected ['extra']")


@pytest.mark.parametrize("name", ["config.yaml", "model.pt", "metrics.json"])
def test_symlink_out_of_the_folder_is_refused(name, export, tmp_path, marker):
    outside = tmp_path / f"outside-{name}"
    (export / name).rename(outside)
    (export / name).symlink_to(outside)
    assert_refused(export, marker, f"{name}: is a symbolic link")


def test_run_directory_with_a_linked_export_is_refused(export, tmp_path, marker):
    run = tmp_path / "run"
    run.mkdir()
    (run / "export").symlink_to(export)
    assert_refused(run, marker, "export: is a symbolic link")


def test_run_directory_and_weights_file_forms_load(tiny_run):
    # A run directory as a training run leaves it: the tiny run of tests/conftest.py.
    _, run = tiny_run
    a = load_export(run)[0]
    b = load_export(run / "export" / "model.pt")[0]
    wav, lengths = torch.randn(1, 8000), torch.tensor([8000])
    with torch.no_grad():
        assert torch.equal(a(wav, lengths).score, b(wav, lengths).score)


def test_sqa_score_refuses_a_hostile_export_with_exit_code_2(export, payload_file, marker, capsys, tmp_path):
    change, _ = HOSTILE_CONFIGS["oc_create_interpolation"]
    edit_config(export, lambda c: change(c, payload_file))
    assert score.main(["--checkpoint", str(export), str(tmp_path / "x.wav")]) == 2
    err = capsys.readouterr().err
    assert "config.yaml" in err and "model.backbone.n_mels holds an interpolation" in err
    assert not marker.exists()


TINY_TRANSFORMERS = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 37,
    "conv_dim": [8, 8],
    "conv_kernel": [10, 3],
    "conv_stride": [5, 2],
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
}


@pytest.mark.parametrize("source", ["torchaudio", "transformers"])
def test_wav2vec2_exports_with_pitch_and_domains_pass_the_checks(source, tmp_path):
    from sqa.data.pitch import F0Extractor
    from sqa.models.ssl import TorchaudioWav2Vec2, TransformersWav2Vec2

    torch.manual_seed(0)
    backbone = (
        TorchaudioWav2Vec2()
        if source == "torchaudio"
        else TransformersWav2Vec2(config=TINY_TRANSFORMERS, normalize=True)
    )
    model = MOSPredictor(backbone, pitch="midi", num_domains=2, domain_dim=4).eval()
    export_predictor(model, tmp_path / "exp", 16000, ["a", "b"], f0_extractor=F0Extractor(method="fcpe"))
    loaded, _, f0 = load_export(tmp_path / "exp")
    assert f0.settings() == F0Extractor(method="fcpe").settings()
    args = (torch.randn(1, 8000), torch.tensor([8000]), torch.tensor([1]), torch.full((1, 26), 220.0))
    with torch.no_grad():
        torch.testing.assert_close(loaded(*args).score, model(*args).score)


def test_allowed_targets_are_the_public_class_names():
    """The allow-list is derived from the classes, and names each where configs name it."""
    from sqa.exports.config import ALLOWED_TARGETS, BACKBONE_TARGETS

    assert {
        "sqa.models.backbone.LogMelBackbone",
        "sqa.models.distillmos.DistillMosBackbone",
        "sqa.models.crepe.CrepeBackbone",
        "sqa.models.ssl.TorchaudioWav2Vec2",
        "sqa.models.ssl.S3prlWav2Vec2",
        "sqa.models.ssl.Fairseq2Wav2Vec2",
        "sqa.models.ssl.TransformersWav2Vec2",
    } == BACKBONE_TARGETS
    assert (
        BACKBONE_TARGETS
        | {
            "sqa.models.predictor.MOSPredictor",
            "sqa.models.uncertainty.UncertainMOSPredictor",
            "sqa.models.aligner.AlignedPredictor",
            "sqa.models.distillmos.DistillMosZeroShot",
            "sqa.models.calibrated.CalibratedPredictor",
            "sqa.models.ensemble.EnsemblePredictor",
            FUSION,
            "sqa.data.pitch.F0Extractor",
        }
        == ALLOWED_TARGETS
    )
    for target in BACKBONE_TARGETS | {FUSION}:
        # The defining module may differ (sqa.models.ssl is a package); the public name resolves.
        module, name = target.rsplit(".", 1)
        assert getattr(importlib.import_module(module), name).export_target() == target


# Address space a subprocess may use: importing torch and sqa maps about 4.6 GB; the rest leaves
# room to load a small export but not for the allocations a hostile one used to cause.
MEMORY_LIMIT = 6 << 30


def load_under_memory_limit(paths: list[Path]) -> list[str]:
    """Load each export of `paths` in one subprocess under MEMORY_LIMIT; returns their refusal messages."""
    code = (
        "import json, resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))\n"
        "from sqa.exports.format import ExportError, load_export\n"
        "messages = []\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        load_export(path)\n"
        "    except ExportError as err:\n"
        "        messages.append(str(err))\n"
        "        continue\n"
        "    sys.exit(f'{path}: loaded')\n"
        "print(json.dumps(messages))\n"
    )
    args = [sys.executable, "-c", code, *map(str, paths)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


HUGE_SIZES = {
    # Used to build a 3 GB model before any check.
    "n_mels": (
        lambda c: c["model"]["backbone"].update(n_mels=1_000_000),
        "n_mels is 1000000; an export's sizes are at most",
    ),
    # Every size within bounds, but 10^11 parameters: the meta-device build counts them.
    "parameters": (
        lambda c: c["model"]["backbone"].update(channels=60_000, conv_layers=6),
        "parameters; an export holds at most",
    ),
    "kernel_size": (
        lambda c: c["model"]["backbone"].update(kernel_size=list(range(300))),
        "model.backbone.kernel_size",
    ),
}


def compress_with_a_large_record(export: Path) -> None:
    """Rewrite `export`'s model.pt deflated, with a 64 MiB record of zeros (under 1 MiB on disk)."""
    prefix = zipfile.ZipFile(export / "model.pt").namelist()[0].split("/")[0]
    rewrite_archive(export / "model.pt", zipfile.ZIP_DEFLATED, {f"{prefix}/data/999": bytes(64 << 20)})


@pytest.fixture(scope="module")
def memory_limited_messages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The message of each hostile export (HUGE_SIZES and "compressed") loaded under MEMORY_LIMIT.

    One subprocess loads them all: its start (importing torch) is most of each load's time.
    """
    root = tmp_path_factory.mktemp("memory_limited")
    paths = {}
    for name in [*HUGE_SIZES, "compressed"]:
        paths[name] = export_predictor(small_predictor(), root / name, 16000, ["a"], metrics={"x": 1})
        if name == "compressed":
            compress_with_a_large_record(paths[name])
        else:
            edit_config(paths[name], HUGE_SIZES[name][0])
    return dict(zip(paths, load_under_memory_limit(list(paths.values())), strict=True))


@pytest.mark.parametrize("case", sorted(HUGE_SIZES))
def test_huge_declared_sizes_are_refused(case, export, marker):
    """In process, for the message (the mutation runs leave out the memory-limited subprocess)."""
    change, expected = HUGE_SIZES[case]
    edit_config(export, change)
    assert_refused(export, marker, expected)


@pytest.mark.parametrize("case", [*sorted(HUGE_SIZES), "compressed"])
def test_hostile_sizes_are_refused_under_a_memory_limit(case, memory_limited_messages):
    expected = HUGE_SIZES[case][1] if case in HUGE_SIZES else "model.pt: compressed records"
    assert expected in memory_limited_messages[case]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c.update(sample_rate=300_000_000), "sample_rate must be an integer in 1..384000"),
        (lambda c: c.update(sample_rate=0), "sample_rate must be an integer in 1..384000"),
        (
            lambda c: c.update(test={"bootstrap": 100_000_000}),
            "test.bootstrap must be an integer in 0..100000",
        ),
        (lambda c: c.update(test={"seed": "x"}), "test.seed must be an integer"),
        (
            lambda c: c.update(data={"eval_batch_size": 10**9}),
            "data.eval_batch_size must be an integer in 0..1024",
        ),
    ],
)
def test_rates_and_counts_are_bounded(change, expected, export, marker):
    edit_config(export, change)
    assert_refused(export, marker, expected)


def test_the_highest_rate_and_bootstrap_are_accepted(export):
    edit_config(export, lambda c: c.update(sample_rate=384_000, test={"bootstrap": 100_000, "seed": 3}))
    assert load_export(export)[1]["sample_rate"] == 384_000


def rewrite_archive(path: Path, compression: int, extra: dict[str, bytes] | None = None) -> None:
    """Rewrite a torch.save archive with `compression`, adding the records `extra`."""
    with zipfile.ZipFile(path) as archive:
        records = [(info.filename, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in [*records, *(extra or {}).items()]:
            archive.writestr(name, data)


def test_a_compressed_weights_archive_is_refused_before_it_inflates(export, marker):
    compress_with_a_large_record(export)
    assert (export / "model.pt").stat().st_size < 1 << 20
    assert_refused(export, marker, "model.pt: compressed records")


def test_an_archive_larger_than_the_architecture_is_refused(export, marker):
    rewrite_archive(export / "model.pt", zipfile.ZIP_STORED)  # the same records, rewritten: loads
    load_export(export)
    prefix = zipfile.ZipFile(export / "model.pt").namelist()[0].split("/")[0]
    rewrite_archive(export / "model.pt", zipfile.ZIP_STORED, {f"{prefix}/data/999": bytes(4 << 20)})
    assert_refused(
        export, marker, "model.pt: declares", "uncompressed; the architecture in config.yaml allows"
    )


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.complex64])
def test_weights_that_are_not_floating_point_are_refused(dtype, export, marker):
    state = small_predictor().state_dict()
    state["head.3.bias"] = torch.ones_like(state["head.3.bias"], dtype=dtype)
    torch.save(state, export / "model.pt")
    assert_refused(export, marker, f"'head.3.bias' holds {dtype} values")


def test_half_precision_weights_are_cast(export):
    state = {k: v.half() for k, v in small_predictor().state_dict().items()}
    torch.save(state, export / "model.pt")
    assert load_export(export)[0].head[3].bias.dtype == torch.float32


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_weights_are_refused(value, export, marker):
    state = small_predictor().state_dict()
    state["head.0.weight"][0, 0] = value
    torch.save(state, export / "model.pt")
    assert_refused(export, marker, "model.pt: 'head.0.weight' holds NaN or infinite values")


@pytest.mark.parametrize("name", ["metrics.json", "notes.md"])
def test_a_sparse_giant_data_file_is_not_read(name, export, marker):
    with open(export / name, "wb") as fh:
        fh.truncate(6 << 30)  # 6 GB, sparse: no disk used
    assert_refused(export, marker, f"{name}: 6442450944 bytes; at most 16777216 are read")


def test_a_fifo_named_like_a_data_file_is_refused_without_blocking(export, marker):
    os.mkfifo(export / "x.json")
    signal.alarm(20)  # a regression blocks on open; the alarm ends the test instead of hanging
    try:
        assert_refused(export, marker, "x.json: not a regular file")
    finally:
        signal.alarm(0)


def test_a_fifo_config_is_refused(export, marker):
    (export / "config.yaml").unlink()
    os.mkfifo(export / "config.yaml")
    assert_refused(export, marker, "config.yaml: not a regular file")


@pytest.fixture
def transformers_export(tmp_path: Path) -> Path:
    from sqa.models.ssl import TransformersWav2Vec2

    torch.manual_seed(0)
    model = MOSPredictor(TransformersWav2Vec2(config=TINY_TRANSFORMERS, normalize=True)).eval()
    return export_predictor(model, tmp_path / "tf", 16000, ["a"])


@pytest.mark.parametrize(
    "key",
    [
        "_attn_implementation",
        "attn_implementation",
        "auto_map",
        "trust_remote_code",
        "_name_or_path",
        "_anything",
    ],
)
def test_backbone_config_keys_outside_the_allow_list_are_refused(
    key, transformers_export, marker, monkeypatch
):
    edit_config(
        transformers_export, lambda c: c["model"]["backbone"]["config"].update({key: "kernels-community/x"})
    )
    monkeypatch.setattr(
        "transformers.Wav2Vec2Model.__init__", lambda *a, **k: pytest.fail("reached transformers")
    )
    message = assert_refused(transformers_export, marker, f"model.backbone.config: refusing ['{key}']")
    assert message.endswith("; a backbone config holds only architecture keys (docs/failures.md)")


def test_a_transformers_export_with_its_written_config_loads(transformers_export):
    config = load_export(transformers_export)[1]["model"]["backbone"]["config"]
    assert "hidden_size" in config and not any(k.startswith("_") for k in config)


# config.yaml's checks on their own (`read_export_config`, nothing built): each bound at and one
# past its limit, each refused token at the start, middle and end of a string and nested.
PREDICTOR = "sqa.models.predictor.MOSPredictor"
LOG_MEL = "sqa.models.backbone.LogMelBackbone"
TRANSFORMERS = "sqa.models.ssl.TransformersWav2Vec2"


def plain_config() -> dict[str, Any]:
    return {
        "format": 1,
        "sample_rate": 16000,
        "domains": ["a"],
        "model": {"_target_": PREDICTOR, "backbone": {"_target_": LOG_MEL, "n_mels": 16, "channels": 8}},
        "f0": None,
    }


def read_changed(tmp_path: Path, change) -> dict[str, Any]:
    """`plain_config()` changed by `change`, written to tmp_path/config.yaml and read back checked."""
    config = plain_config()
    change(config)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return read_export_config(path)


def refused_config(tmp_path: Path, change, *fragments: str) -> str:
    with pytest.raises(ExportError) as info:
        read_changed(tmp_path, change)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'config.yaml'}: "), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def backbone(**kwargs: Any):
    return lambda c: c["model"]["backbone"].update(kwargs)


def test_the_plain_config_is_read_as_written(tmp_path):
    assert read_changed(tmp_path, lambda c: None) == plain_config()


@pytest.mark.parametrize("text", ["${oc.env:HOME}", "n${x}", "abc${", "$ and {", "${"])
def test_an_interpolation_anywhere_in_a_value_or_key_is_refused(text, tmp_path):
    if "${" not in text:  # a dollar and a brace apart are plain text
        assert read_changed(tmp_path, lambda c: c.update(notes={text: [text]}))["notes"] == {text: [text]}
        return
    refused_config(tmp_path, lambda c: c.update(notes=text), "notes holds an interpolation")
    refused_config(
        tmp_path,
        lambda c: c.update(notes={"deep": [{"x": [1, text]}]}),
        "notes.deep[0].x[1] holds an interpolation",
    )
    refused_config(tmp_path, lambda c: c.update({text: 1}), f"key {text} holds an interpolation")
    refused_config(tmp_path, lambda c: c.update(notes=[{"a": {text: 1}}]), "key notes[0].a.")


def test_special_keys_are_those_with_an_underscore_at_both_ends(tmp_path):
    config = read_changed(tmp_path, lambda c: c.update(notes={"_draft": 1, "draft_": 2, "a_b": 3}))
    assert config["notes"] == {"_draft": 1, "draft_": 2, "a_b": 3}
    for key in ["_x_", "__", "_args_"]:
        refused_config(
            tmp_path, lambda c, key=key: c.update(notes=[{"a": {key: 1}}]), f"notes[0].a.{key}: special key"
        )


def test_non_string_keys(tmp_path):
    assert read_changed(tmp_path, lambda c: c.update(notes={3: "x"}))["notes"] == {3: "x"}
    refused_config(tmp_path, lambda c: c.update(notes={True: "x"}), "key True under notes is not a string")
    refused_config(tmp_path, lambda c: c.update({1.5: "x"}), "key 1.5 under (top level) is not a string")


@pytest.mark.parametrize(
    ("value", "accepted"), [(None, True), (0.5, True), (b"\x00", False), ({"a": {1, 2}}, False)]
)
def test_values_are_plain_data(value, accepted, tmp_path):
    if accepted:
        assert read_changed(tmp_path, lambda c: c.update(notes=[value]))["notes"] == [value]
    else:
        refused_config(tmp_path, lambda c: c.update(notes=[value]), "unsupported value of type")


def test_a_target_is_allowed_in_its_places_only(tmp_path):
    corpus = {"_target_": "sqa.data.readers.read_csv_manifest", "root": "corpus"}
    f0 = {"_target_": "sqa.data.pitch.F0Extractor", "method": "dio"}
    config = read_changed(tmp_path, lambda c: c.update(data={"corpus": corpus}, f0=f0))
    assert config["data"]["corpus"] == corpus and config["f0"] == f0
    refused_config(
        tmp_path,
        lambda c: c.update(data={"corpus": {"_target_": "os.system"}}),
        "data.corpus._target_: refusing to build 'os.system'; allowed there: sqa.data.readers.",
    )
    refused_config(
        tmp_path,
        lambda c: c.update(data={"reader": {"_target_": "sqa.data.readers.read_csv_manifest"}}),
        "data.reader._target_: a _target_ is only allowed at model, model.backbone, model.backbone.first, "
        "model.backbone.second, model.members.*, model.members.*.backbone, model.members.*.backbone.first, "
        "model.members.*.backbone.second, f0, data.corpus",
    )


def test_targets_of_moved_modules_are_read_by_their_current_names(tmp_path):
    old = {"_target_": "sqa.data.corpus.read_csv_manifest", "root": "c"}
    config = read_changed(tmp_path, lambda c: c.update(data={"corpus": old}))
    assert config["data"]["corpus"]["_target_"] == "sqa.data.readers.read_csv_manifest"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c.update(format="1"), "format is '1'; this sqa reads format 1"),
        (lambda c: c.pop("format"), "format is None"),
        (lambda c: c.update(sample_rate=True), "sample_rate must be an integer in 1..384000, got True"),
        (lambda c: c.update(sample_rate=16000.0), "sample_rate must be an integer in 1..384000, got 16000.0"),
        (lambda c: c.update(sample_rate=384_001), "got 384001"),
        (lambda c: c.update(sample_rate=0), "got 0"),
        (lambda c: c.pop("sample_rate"), "got None"),
        (lambda c: c.update(domains="a"), "domains must be a list of names, got 'a'"),
        (lambda c: c.update(domains=["a", 1]), "domains must be a list of names, got ['a', 1]"),
        (lambda c: c.pop("model"), "model must be a mapping with a _target_, got None"),
        (lambda c: c["model"].pop("_target_"), "model must be a mapping with a _target_, got {"),
        (lambda c: c.update(f0="dio"), "f0 must be a mapping with a _target_, got 'dio'"),
        (lambda c: c.update(f0={"method": "dio"}), "f0 must be a mapping with a _target_"),
        (lambda c: c["model"].update(backbone="logmel"), "model.backbone must be a mapping with a _target_"),
        (
            lambda c: c["model"]["backbone"].pop("_target_"),
            "model.backbone must be a mapping with a _target_",
        ),
    ],
)
def test_top_level_settings_are_refused_with_their_name(change, expected, tmp_path):
    refused_config(tmp_path, change, expected)


def test_top_level_settings_at_their_limits_and_defaults_are_accepted(tmp_path):
    assert read_changed(tmp_path, lambda c: c.update(sample_rate=1))["sample_rate"] == 1
    assert read_changed(tmp_path, lambda c: c.update(sample_rate=384_000))["sample_rate"] == 384_000
    assert "domains" not in read_changed(tmp_path, lambda c: c.pop("domains"))


@pytest.mark.parametrize(
    ("section", "key", "limit"),
    [("test", "bootstrap", 100_000), ("test", "seed", None), ("data", "eval_batch_size", 1024)],
)
def test_test_and_data_counts_at_and_past_their_bounds(section, key, limit, tmp_path):
    allowed = "an integer ≥ 0" if limit is None else f"an integer in 0..{limit}"
    for value in [0, 10**12 if limit is None else limit, None]:
        config = read_changed(tmp_path, lambda c, v=value: c.update({section: {key: v}}))
        assert config[section][key] == value
    assert read_changed(tmp_path, lambda c: c.update({section: None}))[section] is None
    for value in [-1, True, "7", 2.0, *([] if limit is None else [limit + 1])]:
        refused_config(
            tmp_path,
            lambda c, v=value: c.update({section: {key: v}}),
            f"{section}.{key} must be {allowed}, got {value!r}",
        )
    refused_config(tmp_path, lambda c: c.update({section: [1]}), f"{section} must be a mapping, got [")


@pytest.mark.parametrize("sign", [1, -1])
def test_architecture_integers_at_and_past_their_bound(sign, tmp_path):
    limit = 1 << 16
    config = read_changed(tmp_path, backbone(n_mels=sign * limit))
    assert config["model"]["backbone"]["n_mels"] == sign * limit
    refused_config(
        tmp_path,
        backbone(n_mels=sign * (limit + 1)),
        f"model.backbone.n_mels is {sign * (limit + 1)}; an export's sizes are at most 65536",
    )
    refused_config(
        tmp_path,
        lambda c: c.update(
            f0={"_target_": "sqa.data.pitch.F0Extractor", "frame_period_ms": sign * (limit + 1)}
        ),
        "f0.frame_period_ms is",
    )
    tiny = {"hidden_size": 32, "conv_dim": [8, sign * (limit + 1)]}
    refused_config(
        tmp_path,
        lambda c: c["model"].update(backbone={"_target_": TRANSFORMERS, "config": tiny}),
        f"model.backbone.config.conv_dim[1] is {sign * (limit + 1)}",
    )


def test_architecture_lists_at_and_past_their_bound(tmp_path):
    names = ["overall", *(f"d{i}" for i in range(255))]
    assert (
        len(read_changed(tmp_path, lambda c: c["model"].update(dimensions=names))["model"]["dimensions"])
        == 256
    )
    refused_config(
        tmp_path,
        lambda c: c["model"].update(dimensions=[*names, "d255"]),
        "model.dimensions has 257 entries; at most 256",
    )
    nested = {"hidden_size": 32, "conv_dim": [8] * 257}
    refused_config(
        tmp_path,
        lambda c: c["model"].update(backbone={"_target_": TRANSFORMERS, "config": nested}),
        "model.backbone.config.conv_dim has 257 entries",
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c["model"].update(dropout=0), None),  # a float argument takes an integer
        (lambda c: c["model"].update(range_clip=False, domain_dim=None, pitch=None), None),
        (lambda c: c["model"].update(domain_dim=4, pitch="midi", score_range=[1, 5]), None),
        (lambda c: c["model"].update(dropout="0.3"), "model.dropout must be float, got '0.3'"),
        (lambda c: c["model"].update(pooling=3), "model.pooling must be str, got 3"),
        (lambda c: c["model"].update(range_clip=1), "model.range_clip must be bool, got 1"),
        (lambda c: c["model"].update(head_dim=True), "model.head_dim must be int, got True"),
        (lambda c: c["model"].update(domain_dim="4"), "model.domain_dim must be int | None, got '4'"),
        (lambda c: c["model"].update(score_range=1), "model.score_range must be Sequence[float], got 1"),
        (
            lambda c: c["model"].update(self=1),
            "model.self: sqa.models.predictor.MOSPredictor has no argument 'self'",
        ),
        (
            lambda c: c["model"].update(backbone={"_target_": TRANSFORMERS, "config": 1}),
            "model.backbone.config must be dict | None",
        ),
        (
            lambda c: c.update(f0={"_target_": "sqa.data.pitch.F0Extractor", "hop": 1}),
            "f0.hop: sqa.data.pitch",
        ),
    ],
)
def test_arguments_are_checked_against_their_constructor(change, expected, tmp_path):
    if expected is None:
        read_changed(tmp_path, change)
    else:
        refused_config(tmp_path, change, expected)


@pytest.mark.parametrize(
    ("target", "key"),
    [
        ("sqa.models.ssl.S3prlWav2Vec2", "upstream"),
        ("sqa.models.ssl.TransformersWav2Vec2", "path"),
        ("sqa.models.ssl.TorchaudioWav2Vec2", "checkpoint"),
        ("sqa.models.ssl.Fairseq2Wav2Vec2", "checkpoint"),
    ],
)
def test_every_argument_naming_a_file_is_refused(target, key, tmp_path):
    refused_config(
        tmp_path,
        lambda c: c["model"].update(backbone={"_target_": target, key: "x"}),
        f"model.backbone.{key}: an export never names files to read or write",
    )


def test_a_transformers_backbone_without_a_config_passes_the_config_check(tmp_path):
    config = read_changed(
        tmp_path, lambda c: c["model"].update(backbone={"_target_": TRANSFORMERS, "config": None})
    )
    assert config["model"]["backbone"] == {"_target_": TRANSFORMERS, "config": None}


def test_a_constructor_refusing_its_arguments_is_named(tmp_path):
    with pytest.raises(ExportError) as info:
        build_node(
            {"_target_": PREDICTOR, "backbone": {"_target_": LOG_MEL}, "score_range": [5, 1]},
            ("model",),
            tmp_path,
        )
    assert str(info.value).startswith(
        f"{tmp_path}: cannot build model ({PREDICTOR}): score_range must be [low, high] with low < high"
    )
    with pytest.raises(ExportError) as info:
        build_node(
            {"_target_": PREDICTOR, "backbone": {"_target_": "sqa.data.pitch.F0Extractor", "method": "x"}},
            ("model",),
            tmp_path,
        )
    assert str(info.value).startswith(
        f"{tmp_path}: cannot build model.backbone (sqa.data.pitch.F0Extractor): f0 method must be"
    )


def test_build_node_builds_the_backbone_with_its_arguments(tmp_path):
    model = build_node(
        {
            "_target_": PREDICTOR,
            "head_dim": 12,
            "backbone": {"_target_": LOG_MEL, "n_mels": 16, "channels": 8},
        },
        ("model",),
        tmp_path,
    )
    assert isinstance(model.backbone, LogMelBackbone) and model.backbone.output_dim == 8
    assert model.head[0].weight.shape == (12, 8)


@pytest.mark.parametrize("size", [100, 101])
def test_read_bounded_at_and_past_its_limit(size, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * size)
    if size == 100:
        assert read_bounded(path, 100) == b"x" * 100
    else:
        with pytest.raises(ExportError, match=f"^{path}: 101 bytes; at most 100 are read$"):
            read_bounded(path, 100)


def test_read_bounded_stops_at_its_limit_where_the_size_is_not_known():
    # A /proc file is regular, and its stated size (0) is not its content's.
    path = Path("/proc/self/maps")
    if not path.exists():
        pytest.skip("needs /proc")
    assert path.stat().st_size == 0
    with pytest.raises(ExportError, match="^/proc/self/maps: more than 10 bytes; at most 10 are read$"):
        read_bounded(path, 10)
    assert len(read_bounded(path, 1 << 20)) > 10


def test_read_bounded_does_not_follow_a_link(tmp_path):
    (tmp_path / "target").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(ExportError, match=f"^{tmp_path / 'link'}: cannot open"):
        read_bounded(tmp_path / "link", 10)
    with pytest.raises(ExportError, match=f"^{tmp_path}: not a regular file"):
        read_bounded(tmp_path, 10)


def test_a_config_at_its_size_limit_is_read(tmp_path):
    path = tmp_path / "config.yaml"
    text = yaml.safe_dump(plain_config()) + "#"
    path.write_text(text + "x" * ((1 << 20) - len(text)))
    assert read_export_config(path) == plain_config()
    path.write_text(text + "x" * ((1 << 20) - len(text) + 1))
    with pytest.raises(ExportError, match="1048577 bytes; at most 1048576 are read"):
        read_export_config(path)


def test_a_folder_named_like_a_data_file_is_refused(export, marker):
    (export / "notes.json").mkdir()
    assert_refused(export, marker, "notes.json: not a regular file")


# sqa.exports.format, .location, .weights: what an export holds, where its files may be, its weights' bounds.
def test_an_export_holds_its_records_and_replaces_an_old_one_only_when_asked(tmp_path):
    split = tmp_path / "test.csv"
    split.write_bytes(b"path,mos\na.wav,3.5\n")
    metrics = {"test1": {"utt": {"rmse": 0.5, "n": 4}, "sys": {"rmse": 0.25, "n": 2}}}
    run_info, training = {"sqa": "9.9.9"}, {"seed": 3, "trainer": {"max_epochs": 5}}
    directory = export_predictor(
        small_predictor(),
        tmp_path / "exp",
        22050,
        ["a", "b"],
        metrics=metrics,
        dimension_metrics={"lyrics": {"lcc": 0.25}},
        data={
            "corpus": {"_target_": "sqa.data.readers.read_csv_manifest", "root": "c"},
            "eval_batch_size": 4,
        },
        test={"seed": 3, "bootstrap": 10},
        run_info=run_info,
        training=training,
        files=[split],
    )
    config = yaml.safe_load((directory / "config.yaml").read_text())
    assert (config["format"], config["sample_rate"], config["domains"], config["f0"]) == (
        1,
        22050,
        ["a", "b"],
        None,
    )
    assert config["data"]["eval_batch_size"] == 4 and config["test"] == {"seed": 3, "bootstrap": 10}
    assert json.loads((directory / "metrics.json").read_text()) == metrics
    assert json.loads((directory / "metrics_lyrics.json").read_text()) == {"lcc": 0.25}
    assert json.loads((directory / "run_info.json").read_text()) == run_info
    assert (directory / "test.csv").read_bytes() == split.read_bytes()
    card = model_card.render(config, metrics, {"lyrics": {"lcc": 0.25}}, run_info, training)
    assert (directory / "README.md").read_text(encoding="utf-8") == card
    assert "trained with sqa 9.9.9" in card and "max_epochs" in card
    with pytest.raises(ExportError, match="exp: already exists; pass overwrite=True to replace it"):
        export_predictor(small_predictor(), directory, 16000, ["a"])
    export_predictor(small_predictor(), directory, 16000, ["c"], overwrite=True)
    config = load_export(directory)[1]
    assert (config["sample_rate"], config["domains"], config["data"], config["test"]) == (
        16000,
        ["c"],
        None,
        None,
    )
    assert json.loads((directory / "metrics.json").read_text()) == {}
    assert not (directory / "run_info.json").exists() and not (directory / "test.csv").exists()


def test_a_loaded_export_predicts_as_the_exported_predictor(export):
    wav, lengths = torch.randn(2, 8000), torch.tensor([8000, 6000])
    with torch.no_grad():
        expected = small_predictor()(wav, lengths).score
        torch.testing.assert_close(load_export(export)[0](wav, lengths).score, expected)


def test_export_paths_resolve_from_a_relative_path_another_folder_home_and_a_link(
    export, tmp_path, monkeypatch
):
    config, weights = export.resolve() / "config.yaml", export.resolve() / "model.pt"
    (tmp_path / "link").symlink_to(export)
    monkeypatch.setenv("HOME", str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for form in [
        "../exp",
        "../exp/model.pt",
        "~/exp",
        "~/exp/model.pt",
        str(tmp_path / "link"),
        "../link/model.pt",
    ]:
        assert resolve_export(form) == (config, weights), form
    assert load_export("../link")[1]["sample_rate"] == 16000
    assert regular_file(Path("../link"), "config.yaml") == Path("../link/config.yaml")
    assert regular_file(Path("../exp"), "model.pt") == Path("../exp/model.pt")


def test_regular_file_refuses_what_is_not_a_regular_file_inside_the_folder(export, tmp_path):
    (tmp_path / "outside.yaml").write_text("x: 1\n")
    with pytest.raises(ExportError, match="outside.yaml: resolves outside"):
        regular_file(export, "../outside.yaml")
    (export / "sub.yaml").mkdir()
    with pytest.raises(ExportError, match="sub.yaml: not a regular file"):
        regular_file(export, "sub.yaml")
    with pytest.raises(ExportError, match=f"nope.yaml: not found; is {export} an sqa export directory"):
        regular_file(export, "nope.yaml")


def test_what_is_not_an_export_is_named(export, tmp_path, marker):
    with pytest.raises(ExportError) as info:
        resolve_export(tmp_path / "missing")
    assert str(info.value) == (
        f"{tmp_path / 'missing'}: not found; expected an export directory (config.yaml, model.pt), "
        "a run directory holding export/, or a model.pt beside its config.yaml"
    )
    (tmp_path / "weights.pt").symlink_to(export / "model.pt")
    with pytest.raises(ExportError, match="weights.pt: is a symbolic link; name the weights file itself"):
        resolve_export(tmp_path / "weights.pt")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ExportError, match="config.yaml: not found; is .*empty an sqa export directory"):
        resolve_export(empty)
    # An export holding a folder named export is still the export (a run directory has no model.pt).
    (export / "export").mkdir()
    assert resolve_export(export) == (export.resolve() / "config.yaml", export.resolve() / "model.pt")


def test_any_link_in_the_export_is_refused(export, tmp_path, marker):
    (tmp_path / "notes.txt").write_text("x")
    (export / "notes.txt").symlink_to(tmp_path / "notes.txt")
    assert_refused(export, marker, "notes.txt: is a symbolic link; an export holds regular files only")


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("metrics.json", b"{", "metrics.json: not a JSON file"),
        ("metrics.json", b"\xff", "metrics.json: not a JSON file"),
        ("extra.json", b"[" * 100_000 + b"]" * 100_000, "extra.json: not a JSON file"),
        ("README.md", b"\xff", "README.md: not UTF-8 text"),
        ("test.csv", b"\xff\x00", None),  # other files are not read
    ],
)
def test_json_and_markdown_files_are_checked(name, data, expected, export, marker):
    (export / name).write_bytes(data)
    if expected is None:
        load_export(export)
    else:
        assert_refused(export, marker, expected)


@pytest.mark.parametrize("extra", [0, 1])
def test_data_files_at_and_past_their_size_limit(extra, export, marker):
    with open(export / "README.md", "wb") as fh:
        fh.truncate((16 << 20) + extra)  # sparse zeros: UTF-8 text
    if extra:
        message = assert_refused(export, marker)
        assert message == f"{export.resolve() / 'README.md'}: 16777217 bytes; at most 16777216 are read"
    else:
        load_export(export)


def test_an_oversized_json_file_is_named_as_such(export, marker):
    with open(export / "metrics.json", "wb") as fh:
        fh.truncate((16 << 20) + 1)
    message = assert_refused(export, marker)
    assert message == f"{export.resolve() / 'metrics.json'}: 16777217 bytes; at most 16777216 are read"


# The small predictor's tensors: convs 8·16·5+8 + 2·(8·8·5+8), norms 6·8, head 64·8+64 + 64+1.
SMALL_PARAMETERS = 648 + 2 * 328 + 48 + 576 + 65
# Its buffers (not saved): the mel filterbank (201 bins × 16 mels) and the 400-sample window.
SMALL_BUFFERS = 201 * 16 + 400


@pytest.mark.parametrize("extra", [0, 1])
def test_weights_declaring_at_and_past_the_architectures_bytes(extra, export, marker):
    # 4 bytes per float32 value, 1 MiB for the archive, 1 KiB for each of the 16 tensors.
    allowed = 4 * SMALL_PARAMETERS + (1 << 20) + 1024 * 16
    with zipfile.ZipFile(export / "model.pt") as archive:
        declared = sum(r.file_size for r in archive.infolist())
        prefix = archive.namelist()[0].split("/")[0]
    padding = {f"{prefix}/data/999": bytes(allowed - declared + extra)}
    rewrite_archive(export / "model.pt", zipfile.ZIP_STORED, padding)
    if extra:
        assert_refused(
            export, marker, f"declares {allowed + 1} bytes uncompressed", f"allows at most {allowed}"
        )
    else:
        load_export(export)


@pytest.mark.parametrize("extra", [0, 1])
def test_models_at_and_past_the_parameter_limit(extra, export, marker, monkeypatch):
    count = SMALL_PARAMETERS + SMALL_BUFFERS
    monkeypatch.setattr("sqa.exports.format.MAX_PARAMETERS", count - extra)
    if extra:
        message = assert_refused(export, marker)
        config = export.resolve() / "config.yaml"
        assert (
            message == f"{config}: the model declares {count} parameters; an export holds at most {count - 1}"
        )
    else:
        load_export(export)


def test_weights_in_the_legacy_format_load(export):
    torch.save(small_predictor().state_dict(), export / "model.pt", _use_new_zipfile_serialization=False)
    assert not zipfile.is_zipfile(export / "model.pt")
    loaded = load_export(export)[0].state_dict()
    for name, tensor in small_predictor().state_dict().items():
        assert torch.equal(loaded[name], tensor), name


def test_read_weights_without_an_architecture_reads_any_tensor_mapping(tmp_path):
    state = {"a": torch.arange(3), "b": torch.ones(2, 2)}
    torch.save(state, tmp_path / "w.pt")
    got = read_weights(tmp_path / "w.pt")
    assert got.keys() == state.keys() and all(torch.equal(got[k], v) for k, v in state.items())


@pytest.mark.parametrize(
    "state", [{"head.0.weight": torch.ones(1), "x": 1.0}, {1: torch.ones(1)}, [torch.ones(1)]]
)
def test_weights_that_are_not_a_mapping_of_names_to_tensors_are_refused(state, tmp_path):
    torch.save(state, tmp_path / "w.pt")
    with pytest.raises(ExportError, match="w.pt: expected a mapping of parameter names to tensors"):
        read_weights(tmp_path / "w.pt")


@pytest.mark.parametrize("count", [5, 6])
def test_missing_weights_are_named_up_to_five(count, export, marker):
    state = small_predictor().state_dict()
    names = sorted(state)[:count]
    for name in names:
        del state[name]
    torch.save(state, export / "model.pt")
    more = " ..." if count > 5 else ""
    assert_refused(export, marker, f"missing {names[:5]}{more}, unexpected []")


@pytest.mark.parametrize("count", [5, 6])
def test_unexpected_weights_are_named_up_to_five(count, export, marker):
    state = small_predictor().state_dict()
    names = [f"extra{i}" for i in range(count)]
    state.update({name: torch.zeros(1) for name in names})
    torch.save(state, export / "model.pt")
    more = " ..." if count > 5 else ""
    assert assert_refused(export, marker).endswith(f"missing [], unexpected {names[:5]}{more}")


@pytest.mark.parametrize(
    ("annotation", "types"),
    [
        ("int | None", (int, type(None))),
        ("float", (int, float)),
        ("str", (str,)),
        ("bool", (bool,)),
        ("Mapping[str, int] | None", (dict, type(None))),
        ("dict", (dict,)),
        ("list[int]", (list,)),
        ("Sequence[float]", (list,)),
        ("nn.Module", None),  # not plain data: the argument is not checked by type
        ("int | nn.Module", None),
    ],
)
def test_the_plain_data_types_an_annotation_accepts(annotation, types):
    assert _accepted_types(annotation) == types


def test_a_weights_archive_with_a_broken_directory_is_refused(export, marker):
    data = (export / "model.pt").read_bytes()
    # The central directory's first header: its end record is intact, so it still looks like a zip.
    (export / "model.pt").write_bytes(data.replace(b"PK\x01\x02", b"PK\x00\x00", 1))
    assert zipfile.is_zipfile(export / "model.pt")
    assert_refused(export, marker, "model.pt: not a plain tensor state_dict (")


def test_the_compressed_record_is_named(export, marker):
    path = export / "model.pt"
    with zipfile.ZipFile(path) as archive:
        records = [(info.filename, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in records:
            deflated = name.endswith("/byteorder")
            archive.writestr(
                name, data, compress_type=zipfile.ZIP_DEFLATED if deflated else zipfile.ZIP_STORED
            )
    assert_refused(export, marker, "compressed records (model/byteorder); torch.save writes none")


def test_weights_saved_on_a_gpu_load_on_the_cpu(export):
    """A GPU-trained export scores on a machine without one: its storages are mapped to the CPU."""
    path = export / "model.pt"
    with zipfile.ZipFile(path) as archive:
        records = [(info.filename, archive.read(info)) for info in archive.infolist()]
    # The pickled location of each storage, "cpu", becomes "cuda:0" (a pickle string: length, text).
    cpu, gpu = b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in records:
            archive.writestr(name, data.replace(cpu, gpu) if name.endswith("data.pkl") else data)
    state = read_weights(path)
    assert {t.device.type for t in state.values()} == {"cpu"}
    expected = small_predictor().state_dict()
    assert all(torch.equal(state[name], tensor) for name, tensor in expected.items())


def test_weights_stay_data_when_the_environment_relaxes_torch_load(export, marker, monkeypatch):
    # torch.load honours this only where its caller did not pass weights_only.
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    torch.save({"w": Payload(marker)}, export / "model.pt")
    assert_refused(export, marker, "model.pt: not a plain tensor state_dict")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda c: c["model"].update(score_range=[5, 1]),
            f"cannot build model ({PREDICTOR}): score_range must be",
        ),
        (
            lambda c: c.update(f0={"_target_": "sqa.data.pitch.F0Extractor", "method": "x"}),
            "cannot build f0 (sqa.data.pitch.F0Extractor): f0 method must be",
        ),
    ],
)
def test_arguments_a_constructor_refuses_are_named_with_the_export(change, expected, export, marker):
    edit_config(export, change)
    assert assert_refused(export, marker).startswith(f"{export.resolve() / 'config.yaml'}: {expected}")


def test_an_alias_is_refused_where_it_stands(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("a: &x 1\nb: *x\n")
    with pytest.raises(ExportError) as info:
        read_export_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a plain YAML file (YAML aliases (*name) are not allowed")
    assert "line 2, column 4" in message


def test_a_long_interpolation_is_quoted_to_its_first_80_characters(tmp_path):
    text = "${oc.env:" + "".join(chr(ord("a") + i % 26) for i in range(100)) + "}"
    message = refused_config(tmp_path, lambda c: c.update(notes=text))
    assert f"notes holds an interpolation ({text[:80]!r}); exports are plain data" in message


def test_a_refused_backbone_lists_every_allowed_one(tmp_path):
    message = refused_config(tmp_path, backbone(_target_="os.system"))
    assert message.endswith(
        "model.backbone._target_: refusing to build 'os.system'; allowed there: "
        "sqa.models.backbone.LogMelBackbone, sqa.models.crepe.CrepeBackbone, "
        "sqa.models.distillmos.DistillMosBackbone, "
        "sqa.models.fusion.FusionBackbone, sqa.models.ssl.Fairseq2Wav2Vec2, sqa.models.ssl.S3prlWav2Vec2, "
        "sqa.models.ssl.TorchaudioWav2Vec2, sqa.models.ssl.TransformersWav2Vec2"
    )


def test_an_export_folder_that_is_a_mount_point_is_refused_in_one_line(tmp_path, monkeypatch):
    import errno

    from sqa.core import atomic

    directory = export_predictor(small_predictor(), tmp_path / "exp", 16000, ["a"])
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    expected = (
        f"{directory}: is a mount point (or in use), which cannot be replaced: an export is written "
        f"beside it and renamed into place; name a folder inside it, e.g. {directory / 'export'}; "
        "nothing was replaced"
    )
    # A mount point that os.path.ismount sees: refused before anything is written.
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == directory or real(p))
    with pytest.raises(ExportError) as err:
        export_predictor(small_predictor(), directory, 16000, ["b"], overwrite=True)
    assert str(err.value) == expected
    monkeypatch.setattr(os.path, "ismount", real)

    # A bind mount it does not see: the rename into place fails with EBUSY, said the same way.
    def busy(a, b):
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(b))

    monkeypatch.setattr(atomic, "_exchange", busy)
    with pytest.raises(ExportError) as err:
        export_predictor(small_predictor(), directory, 16000, ["b"], overwrite=True)
    assert str(err.value) == expected
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]  # no temporary folder left
