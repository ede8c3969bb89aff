"""sqa-import sizes the architecture an upstream file declares before it builds it.

An s3prl-converted upstream is a few kilobytes of config and whatever weights it holds; its
model_cfg alone decides how much the import allocates. The import applies the export's own limits
(`sqa.exports.bounds.MAX_PARAMETERS` on the model built on the meta device, and the config bounds
of `sqa.exports.bounds`) first, and reads `conv_feature_layers`, which fairseq evaluates as
Python, as data. Each rule is tested on both sides of its threshold.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml

from sqa.exports import importers
from sqa.exports.config import MAX_ARCH_INTEGER
from sqa.exports.format import MAX_PARAMETERS, ExportError, load_export
from sqa.models.ssl import S3prlWav2Vec2
from sqa.models.ssl.files import load_torch_file
from sqa.models.ssl.interop import MAX_CONV_LAYERS, conv_layers
from tests.models.test_ssl_sources import FAIRSEQ_TINY, fairseq_reference_model

pytestmark = pytest.mark.usefixtures("no_network")

# 48 layers of width 8192: about 39 billion parameters, 156 GB of float32 if it were built.
HUGE = {
    **FAIRSEQ_TINY,
    "encoder_layers": 48,
    "encoder_embed_dim": 8192,
    "encoder_ffn_embed_dim": 32768,
    "encoder_attention_heads": 64,
}
# The feature encoder of every released wav2vec2 (base: the Wav2Vec2Config default; large).
RELEASED_CONV_SPECS = (
    "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512,2,2)] + [(512,2,2)]",
    "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512,2,2)] * 2",
)
HEAD_DIM, DOMAIN_DIM = 4, 8


def converted_upstream(path: Path, model_cfg: dict, weights: dict | None = None) -> Path:
    """An s3prl-converted wav2vec2 file as `load_and_convert_fairseq_ckpt` writes it."""
    torch.save({"task_cfg": {"normalize": True}, "model_cfg": model_cfg, "model_weight": weights or {}}, path)
    return path


def singmos_pro_release(path: Path, ssl: dict[str, torch.Tensor], ssl_dim: int) -> Path:
    """A singmos_pro release in its authors' key layout: wav2vec2 `ssl`, 6 domain IDs, tiny head."""
    torch.manual_seed(1)
    state = {f"{importers.SINGMOS_SSL}{key}": value for key, value in ssl.items()}
    state["domain_emb.weight"] = torch.randn(6, DOMAIN_DIM)
    state["decoder.net.0.weight"] = torch.randn(HEAD_DIM, ssl_dim + DOMAIN_DIM)
    state["decoder.net.0.bias"] = torch.randn(HEAD_DIM)
    state["decoder.net.3.weight"] = torch.randn(1, HEAD_DIM)
    state["decoder.net.3.bias"] = torch.randn(1)
    torch.save(state, path)
    return path


def tiny_import(tmp_path: Path, model_cfg: dict) -> list[str]:
    """sqa-import's arguments for a singmos_pro release and its upstream, both of `model_cfg`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    weights = fairseq_reference_model(model_cfg).state_dict()
    upstream = converted_upstream(tmp_path / "upstream.pt", model_cfg, weights)
    release = singmos_pro_release(tmp_path / "release.pth", weights, model_cfg["encoder_embed_dim"])
    return ["singmos_pro", str(release), str(tmp_path / "export"), "--upstream-checkpoint", str(upstream)]


def record_builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The device of each backbone the import builds; a build off the meta device fails the test."""
    devices: list[str] = []

    def built(**kwargs: object) -> S3prlWav2Vec2:
        devices.append(torch.get_default_device().type)
        # Fails before allocating: without the sizing, this build would need the declared memory.
        assert devices[-1] == "meta", "the import built the declared architecture for real"
        return S3prlWav2Vec2(**kwargs)

    monkeypatch.setattr(importers, "S3prlWav2Vec2", built)
    return devices


def size(model: torch.nn.Module) -> int:
    """The count `sqa.load` sizes an export by: its model's parameters and buffers."""
    return sum(t.numel() for t in (*model.parameters(), *model.buffers()))


def import_args(tmp_path: Path, upstream: Path) -> list[str]:
    release = singmos_pro_release(tmp_path / "release.pth", {"w": torch.ones(1)}, ssl_dim=8)
    return ["singmos_pro", str(release), str(tmp_path / "export"), "--upstream-checkpoint", str(upstream)]


def test_a_small_file_declaring_a_huge_encoder_is_refused_before_it_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = converted_upstream(tmp_path / "huge.pt", HUGE)
    assert upstream.stat().st_size < 4096
    args = import_args(tmp_path, upstream)
    devices = record_builds(monkeypatch)
    assert importers.main(args) == 1
    # Counted on the meta device only: 38 billion parameters never get memory.
    assert devices == ["meta"], devices
    err = capsys.readouterr().err.strip()
    found = re.fullmatch(
        rf"sqa-import: {re.escape(str(upstream))}: its model_cfg declares a wav2vec2 of 48 layers of "
        rf"width 8192, (\d+) parameters with the head; an sqa export holds at most {MAX_PARAMETERS}, "
        "so nothing was built",
        err,
    )
    assert found and int(found.group(1)) > 38 * 10**9, err
    assert not (tmp_path / "export").exists()


def test_the_parameter_limit_holds_at_the_exports_count_and_refuses_one_more(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = tiny_import(tmp_path, FAIRSEQ_TINY)
    assert importers.main(args) == 0
    count = size(load_export(tmp_path / "export")[0])
    monkeypatch.setattr(importers, "MAX_PARAMETERS", count)
    assert importers.main([*args, "--overwrite"]) == 0
    assert size(load_export(tmp_path / "export")[0]) == count
    monkeypatch.setattr(importers, "MAX_PARAMETERS", count - 1)
    devices = record_builds(monkeypatch)
    assert importers.main([*args[:2], str(tmp_path / "refused"), *args[3:]]) == 1
    assert devices == ["meta"] and not (tmp_path / "refused").exists()
    err = capsys.readouterr().err
    assert (
        f"{args[-1]}: its model_cfg declares a wav2vec2 of 2 layers of width 256, {count} parameters" in err
    )
    assert f"holds at most {count - 1}, so nothing was built" in err


def test_model_cfg_integers_have_the_exports_bounds_before_anything_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A billion layers of width 8: few parameters each, but a billion modules even on the meta device.
    upstream = converted_upstream(
        tmp_path / "deep.pt", {**FAIRSEQ_TINY, "encoder_layers": 10**9, "encoder_embed_dim": 8}
    )
    devices = record_builds(monkeypatch)
    assert importers.main(import_args(tmp_path, upstream)) == 1
    # Refused from the integers alone: not even the meta device builds a billion modules.
    assert devices == []
    assert capsys.readouterr().err.strip() == (
        f"sqa-import: {upstream}: model_cfg.encoder_layers is 1000000000; an export's sizes are at most "
        f"{MAX_ARCH_INTEGER}"
    )
    monkeypatch.undo()
    # A pretraining-only integer (negatives sampled per step) at the bound: imported, and it loads.
    args = tiny_import(tmp_path / "at", {**FAIRSEQ_TINY, "num_negatives": MAX_ARCH_INTEGER})
    assert importers.main(args) == 0
    config = yaml.safe_load((Path(args[2]) / "config.yaml").read_text())
    assert config["model"]["backbone"]["model_config"]["num_negatives"] == MAX_ARCH_INTEGER
    assert load_export(args[2])[0] is not None
    args = tiny_import(tmp_path / "above", {**FAIRSEQ_TINY, "num_negatives": MAX_ARCH_INTEGER + 1})
    assert importers.main(args) == 1
    assert f"model_cfg.num_negatives is {MAX_ARCH_INTEGER + 1}" in capsys.readouterr().err
    assert not Path(args[2]).exists()


def test_conv_feature_layers_are_read_as_data_never_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    marker = tmp_path / "ran"
    code = f"__import__('pathlib').Path({str(marker)!r}).touch() or [(128, 10, 5)]"
    # In an upstream file: the import refuses it, naming the file.
    upstream = converted_upstream(tmp_path / "code.pt", {**FAIRSEQ_TINY, "conv_feature_layers": code})
    assert importers.main(import_args(tmp_path, upstream)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"sqa-import: {upstream}: cannot build a wav2vec2 from its model_cfg") and (
        "never evaluated as code" in err
    )
    assert not marker.exists()
    # In a downloaded export's config.yaml: sqa.load refuses it, naming config.yaml.
    args = tiny_import(tmp_path / "ok", FAIRSEQ_TINY)
    assert importers.main(args) == 0
    config_path = Path(args[2]) / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["model"]["backbone"]["model_config"]["conv_feature_layers"] = code
    config_path.write_text(yaml.safe_dump(config))
    with pytest.raises(ExportError, match=rf"{re.escape(str(config_path))}: cannot build model.backbone"):
        load_export(args[2])
    assert not marker.exists()


def test_conv_feature_layers_parse_as_fairseq_evaluates_them_within_a_bound() -> None:
    for spec in (*RELEASED_CONV_SPECS, FAIRSEQ_TINY["conv_feature_layers"]):
        # eval, as fairseq does, of the test's own constants.
        assert conv_layers(spec, "cfg") == eval(spec)
    assert len(conv_layers(f"[(8, 2, 1)] * {MAX_CONV_LAYERS}", "cfg")) == MAX_CONV_LAYERS
    refused = {
        f"[(8, 2, 1)] * {MAX_CONV_LAYERS + 1}": f"declares {MAX_CONV_LAYERS + 1} convolutions; at most",
        # Refused from the declared count: the list is never expanded.
        "[(8, 2, 1)] * 1000000000000": "declares 1000000000000 convolutions",
        "[(8, 2, 1)] * 2 ** 40": "holds '2 \\*\\* 40'; only integers",
        "[(8, 2)]": "must be a list of \\(dim, kernel, stride\\) integers, each above 0",
        "[(8, 0, 1)]": "each above 0",
        "[]": "each above 0",
        "[(8, 2, 1)": "must be a list of",
    }
    for spec, message in refused.items():
        with pytest.raises(ValueError, match=rf"^cfg: conv_feature_layers .*{message}"):
            conv_layers(spec, "cfg")
    with pytest.raises(ValueError, match=r"written as fairseq does \(a string\); got \[\[8, 2, 1\]\]"):
        conv_layers([[8, 2, 1]], "cfg")


def test_conv_feature_layers_read_only_list_plus_list_and_list_times_n_naming_where() -> None:
    # Anything else is refused whole, even where Python would compute something (a tuple times n).
    for spec in ("2 + [(8, 2, 1)]", "[(8, 2, 1)] + 2", "[(8, 2, 1)] * [(8, 2, 1)]", "2 * 3", "(8, 2, 1) * 2"):
        with pytest.raises(ValueError) as error:
            conv_layers(spec, "cfg")
        assert str(error.value) == "cfg: conv_feature_layers: only list + list and list * n are read", spec
    # The count of a sum is the sum of the counts.
    with pytest.raises(ValueError, match=rf"declares 300 convolutions; at most {MAX_CONV_LAYERS}$"):
        conv_layers("[(8, 2, 1)] * 200 + [(8, 2, 1)] * 100", "cfg")
    # A fault anywhere inside, in a tuple, a list or either side of an operator, names where.
    for spec in ("[(8, 2, x)]", "[(8, 2, 1)] * n + [(8, 2, 1)]", "[(8, 2, 1)] + [(8, 2, 1)] * n"):
        with pytest.raises(ValueError, match=r"^cfg: conv_feature_layers holds '\w'; only integers"):
            conv_layers(spec, "cfg")
    # What it holds is quoted to 80 characters, and the message says it never runs.
    name = "x" * 100
    with pytest.raises(ValueError) as error:
        conv_layers(f"[(8, 2, {name})]", "cfg")
    assert str(error.value) == (
        f"cfg: conv_feature_layers holds {name[:80]!r}; only integers, tuples, lists, + and * are read "
        "(it is never evaluated as code)"
    )


def test_a_refused_conv_spec_is_quoted_to_its_first_80_characters() -> None:
    layers = ", ".join(["(512, 3, 2)"] * 8)
    for spec in (f"[{layers}, (0, 2, 2)]", f"[{layers}"):
        with pytest.raises(ValueError) as error:
            conv_layers(spec, "cfg")
        assert len(spec) > 81 and repr(spec[:80]) in str(error.value)
        assert repr(spec[:81]) not in str(error.value)


def test_a_torch_file_that_pickles_code_is_refused_before_any_of_it_runs(tmp_path: Path) -> None:
    # `weights_only` loading refuses any class outside torch's tensor allowlist: no code in a
    # downloaded checkpoint runs. `Path` stands for any such class.
    path = tmp_path / "checkpoint.pt"
    torch.save({"weights": torch.zeros(2), "where": Path("/x")}, path)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} cannot be read as a checkpoint: "):
        load_torch_file(path, "a checkpoint")
    torch.save({"weights": torch.zeros(2)}, path)
    assert load_torch_file(path, "a checkpoint")["weights"].tolist() == [0.0, 0.0]
