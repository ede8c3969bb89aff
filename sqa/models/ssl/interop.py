"""Reading other libraries' files: checkpoint loaders, input-contract readers and key bridges.

Everything here reads local files only, unpickles with `weights_only=True`, and raises an error
naming the file and what was expected there.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import pickle
import re
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sqa.core.extras import require

# s3prl hub entries that take a user-given checkpoint instead of naming a released model.
_S3PRL_GENERIC_ENTRIES = ("wav2vec2_custom", "wav2vec2_local", "wav2vec2_url")

# fairseq's single positional convolution, "encoder.pos_conv.0.{weight_g,weight_v,bias}".
_FAIRSEQ_POS_CONV = re.compile(r"^encoder\.pos_conv\.0\.(?=[a-z])")

# The most feature-encoder convolutions `conv_layers` reads: wav2vec2 has 7, and a declared
# "[...] * n" must not expand without bound before the model is sized.
MAX_CONV_LAYERS = 256


def patch_torchaudio_for_s3prl() -> None:
    """Let s3prl 0.4.18 import under torchaudio >= 2.9, which removed two APIs it uses at import.

    `s3prl.nn`, `s3prl.hub` and its data modules call `torchaudio.set_audio_backend(...)` and
    import `torchaudio.sox_effects` when imported. Audio I/O in sqa goes through soundfile, so a
    no-op backend setter and a `sox_effects` stub whose functions raise are enough. Each piece is
    installed only where torchaudio lacks it, so the shim is a no-op on older torchaudio.
    """
    torchaudio = require("torchaudio", "ssl", "s3prl wav2vec2 backbones")
    if not hasattr(torchaudio, "set_audio_backend"):
        torchaudio.set_audio_backend = lambda backend: None
    if "torchaudio.sox_effects" not in sys.modules and not hasattr(torchaudio, "sox_effects"):
        stub = types.ModuleType("torchaudio.sox_effects")

        def removed(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("torchaudio.sox_effects was removed in torchaudio 2.9")

        stub.apply_effects_tensor = removed
        stub.apply_effects_file = removed
        sys.modules["torchaudio.sox_effects"] = stub
        torchaudio.sox_effects = stub


def existing(path: str | Path, what: str) -> Path:
    """`path` as a Path, or FileNotFoundError naming it and what was expected there."""
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; expected {what}")
    return path


def load_torch_file(path: Path, expected: str) -> Any:
    """`torch.load(path, weights_only=True)` on CPU; ValueError naming `path` if it cannot be read."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        raise ValueError(f"{path} cannot be read as {expected}: {error}") from error


def load_weights_into(model: nn.Module, state: Mapping[str, Any], path: Path | str, what: str) -> None:
    """`model.load_state_dict(state)`; ValueError naming `path` when it does not match `what`."""
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"{path} does not match {what}: {error}") from error


def load_torchaudio_checkpoint(model: nn.Module, checkpoint: str, arch: str) -> None:
    """Load a torchaudio wav2vec2 state_dict file into `model` (torchaudio arch `arch`)."""
    expected = f"a torch.save(model.state_dict()) file of a torchaudio wav2vec2, arch {arch!r}"
    path = existing(checkpoint, expected)
    state = load_torch_file(path, expected)
    if not isinstance(state, Mapping):
        raise ValueError(f"{path} holds a {type(state).__name__}, expected a torchaudio state_dict")
    load_weights_into(model, state, path, f"torchaudio arch {arch!r}")


def s3prl_upstream_names() -> list[str]:
    """Names of the s3prl wav2vec2 hub entries that `S3prlWav2Vec2(upstream=...)` accepts."""
    patch_torchaudio_for_s3prl()
    from s3prl.upstream.wav2vec2 import hubconf

    return sorted(
        name
        for name, entry in inspect.getmembers(hubconf, inspect.isfunction)
        if entry.__module__ == hubconf.__name__
        and not name.startswith("_")
        and name not in _S3PRL_GENERIC_ENTRIES
    )


def _ckpt_assignments(function: ast.FunctionDef) -> list[tuple[int, str]]:
    """(line, URL) of each `kwargs["ckpt"] = "<URL>"` in an s3prl hub function."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.slice, ast.Constant)
                    and target.slice.value == "ckpt"
                ):
                    found.append((node.lineno, node.value.value))
    return found


def s3prl_checkpoint_url(upstream: str) -> str:
    """The converted-checkpoint URL s3prl's wav2vec2 hub entry `upstream` would download.

    s3prl keeps these URLs only inside its hub functions, which download when called, so the
    table is read from hubconf's source: the last `kwargs["ckpt"]` an entry assigns (its
    non-legacy URL), or that of the entry it delegates to (e.g. `wav2vec2` -> `wav2vec2_base_960`).
    """
    patch_torchaudio_for_s3prl()
    from s3prl.upstream.wav2vec2 import hubconf

    functions = {
        node.name: node
        for node in ast.parse(inspect.getsource(hubconf)).body
        if isinstance(node, ast.FunctionDef)
    }
    name = upstream
    while name in functions:
        assigned = _ckpt_assignments(functions[name])
        if assigned:
            return max(assigned)[1]
        calls = [
            node.func.id
            for node in ast.walk(functions[name])
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions
        ]
        name = calls[0] if calls else ""
    raise ValueError(f"s3prl's wav2vec2 hubconf names no checkpoint URL for {upstream!r}")


def s3prl_cached_checkpoint(upstream: str) -> Path:
    """Find hub entry `upstream`'s converted checkpoint in s3prl's cache; never download it."""
    from s3prl.util.download import urls_to_filepaths

    names = s3prl_upstream_names()
    if upstream not in names:
        raise ValueError(f"upstream must be one of the s3prl wav2vec2 entries {names}, got {upstream!r}")
    url = s3prl_checkpoint_url(upstream)
    path = Path(urls_to_filepaths(url, download=False))
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: s3prl upstream {upstream!r} is not in the local s3prl cache "
            f"({path.parent}). Download {url} to that path on a machine with network access, "
            "or pass checkpoint= a local s3prl-converted wav2vec2 file."
        )
    return path


def read_s3prl_checkpoint(checkpoint: str) -> tuple[dict, dict, dict]:
    """(model_cfg, task_cfg, model_weight) of an s3prl-converted wav2vec2 checkpoint."""
    expected = "an s3prl-converted wav2vec2 checkpoint (a dict with model_cfg, task_cfg, model_weight)"
    path = existing(checkpoint, expected)
    state = load_torch_file(path, expected)
    required = {"model_cfg", "task_cfg", "model_weight"}
    if not isinstance(state, Mapping) or not required <= state.keys():
        found = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(f"{path} is not {expected}; found {found}")
    return dict(state["model_cfg"]), dict(state["task_cfg"]), state["model_weight"]


def conv_layers(spec: Any, where: str) -> list[tuple[int, int, int]]:
    """The (dim, kernel, stride) triples of fairseq's `conv_feature_layers` string, read without eval.

    fairseq, and s3prl's copy of it, `eval()` the string (e.g. "[(512, 10, 5)] + [(512, 3, 2)] * 4"),
    which would run any code a checkpoint or an export puts there. Only lists of integer triples
    joined by `+` and repeated by `* n`, at most MAX_CONV_LAYERS in all, are read; anything else is a
    ValueError naming `where`.
    """
    expected = f"{where}: conv_feature_layers must be a list of (dim, kernel, stride) integers"
    if not isinstance(spec, str):
        raise ValueError(f"{expected}, written as fairseq does (a string); got {spec!r}")
    try:
        layers = _conv_value(ast.parse(spec, mode="eval").body, where)
    except (SyntaxError, RecursionError, MemoryError) as error:
        raise ValueError(f"{expected}; got {spec[:80]!r} ({error})") from None
    if (
        not isinstance(layers, list)
        or not layers
        or not all(
            isinstance(layer, tuple) and len(layer) == 3 and all(isinstance(v, int) and v > 0 for v in layer)
            for layer in layers
        )
    ):
        raise ValueError(f"{expected}, each above 0; got {spec[:80]!r}")
    return layers


def _conv_value(node: ast.expr, where: str) -> Any:
    """The value of one node of a `conv_feature_layers` expression: integers, tuples, lists, + and *."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Tuple | ast.List):
        values = [_conv_value(element, where) for element in node.elts]
        return tuple(values) if isinstance(node, ast.Tuple) else values
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
        left, right = _conv_value(node.left, where), _conv_value(node.right, where)
        if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
            count = len(left) + len(right)
        elif isinstance(node.op, ast.Mult) and isinstance(left, list) and type(right) is int:
            count = len(left) * right
        else:
            raise ValueError(f"{where}: conv_feature_layers: only list + list and list * n are read")
        # Checked before the list is built: "[(512, 3, 2)] * 1000000000000" is never expanded.
        if count > MAX_CONV_LAYERS:
            raise ValueError(
                f"{where}: conv_feature_layers declares {count} convolutions; at most {MAX_CONV_LAYERS}"
            )
        return left + right if isinstance(node.op, ast.Add) else left * right
    raise ValueError(
        f"{where}: conv_feature_layers holds {ast.unparse(node)[:80]!r}; only integers, tuples, lists, "
        "+ and * are read (it is never evaluated as code)"
    )


def s3prl_configs(checkpoint: str | None = None, upstream: str | None = None) -> tuple[dict, dict]:
    """(model_cfg, task_cfg) of an s3prl-converted wav2vec2 file, local or in s3prl's cache.

    `checkpoint` is a local file; `upstream` names an s3prl wav2vec2 entry whose converted file
    is already in s3prl's cache (never downloaded).
    """
    if (checkpoint is None) == (upstream is None):
        raise ValueError("give exactly one of checkpoint or upstream")
    path = str(s3prl_cached_checkpoint(upstream)) if checkpoint is None else checkpoint
    model_cfg, task_cfg, _ = read_s3prl_checkpoint(path)
    return model_cfg, task_cfg


def load_fairseq2_checkpoint(hub: Any, model: nn.Module, config: Any, checkpoint: str, arch: str) -> bool:
    """Load `checkpoint` into `model`; True when it was an original fairseq checkpoint."""
    from fairseq2.model_checkpoint import CorruptModelCheckpointError

    expected = (
        "a fairseq2 wav2vec2 checkpoint (model directory with pp_00/, .pt/.pth/.bin or "
        f".safetensors file) or an original fairseq wav2vec2 .pt, for arch {arch!r}"
    )
    path = existing(checkpoint, expected)
    try:
        # fairseq2's loaders read every format it knows and apply its state dict converter.
        with torch.serialization.safe_globals([argparse.Namespace]):
            state = dict(hub.iter_checkpoint(path, config))
    except CorruptModelCheckpointError as error:
        raise ValueError(
            f"{path} is not {expected}: {error} An original fairseq .pt that "
            "pickles other Python objects can be reduced to its weights from a trusted copy: "
            "torch.save({'model': torch.load(path, weights_only=False)['model']}, 'weights.pt')"
        ) from error
    original = "mask_emb" in state
    if original:
        state = convert_fairseq_state_dict(state, config)
    load_weights_into(model, state, path, f"fairseq2 arch {arch!r}")
    return original


def fairseq_task_normalize(path: Path) -> bool | None:
    """`normalize` of an original fairseq checkpoint's task: its argparse `args` or `cfg["task"]`.

    None when the file records neither (e.g. weights reduced to {"model": ...}).
    """
    with torch.serialization.safe_globals([argparse.Namespace]):
        try:
            # mmap reads only the pickled header, not the weights, from zip-format files.
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:
            state = torch.load(path, map_location="cpu", weights_only=True)
    args, cfg = state.get("args"), state.get("cfg")
    if args is not None and hasattr(args, "normalize"):
        return bool(args.normalize)
    if isinstance(cfg, Mapping) and isinstance(cfg.get("task"), Mapping) and "normalize" in cfg["task"]:
        return bool(cfg["task"]["normalize"])
    return None


def convert_fairseq_state_dict(state: dict[str, Any], config: Any) -> dict[str, Any]:
    """Rename an original fairseq wav2vec2 state dict to fairseq2 keys with fairseq2's converter.

    fairseq2 0.8.1's `convert_wav2vec2_state_dict` recognises a fairseq state dict by a
    "mask_emb.weight" key, but fairseq stores its mask embedding as the bare parameter
    "mask_emb", and it has no rule for the single positional convolution
    ("encoder.pos_conv.0.*") of the released wav2vec2 models. Both are bridged around the call.
    """
    from fairseq2.models.wav2vec2 import convert_wav2vec2_state_dict

    renamed = {}
    for key, value in state.items():
        if key == "mask_emb":
            key = "mask_emb.weight"
        renamed[_FAIRSEQ_POS_CONV.sub("encoder_frontend.pos_encoder.conv.", key)] = value
    converted = convert_wav2vec2_state_dict(renamed, config)
    converted["masker.temporal_mask_embed"] = converted.pop("masker.temporal_mask_embed.weight")
    return converted


def load_transformers_dir(model_class: Callable, path: str, runtime: dict) -> nn.Module:
    """`model_class.from_pretrained` of a local save_pretrained directory, never a download."""
    expected = "a local wav2vec2 directory written by save_pretrained (config.json and weights)"
    directory = existing(path, expected)
    if not (directory / "config.json").is_file():
        raise ValueError(f"{directory} is not {expected}: it has no config.json")
    try:
        model, info = model_class.from_pretrained(
            directory, local_files_only=True, output_loading_info=True, **runtime
        )
    except (OSError, ValueError) as error:
        raise ValueError(f"{directory} is not {expected}: {error}") from error
    if info["missing_keys"]:
        raise ValueError(f"{directory} lacks wav2vec2 weights: {sorted(info['missing_keys'])}")
    return model


def transformers_do_normalize(directory: Path) -> bool | None:
    """`do_normalize` of a transformers directory's preprocessor_config.json (None: no such file)."""
    path = directory.expanduser() / "preprocessor_config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} cannot be read as JSON: {error}") from error
    if not isinstance(config, dict) or not isinstance(config.get("do_normalize", False), bool):
        raise ValueError(f"{path}: expected a JSON object whose do_normalize is true or false")
    # Wav2Vec2FeatureExtractor's own default when the key is absent.
    return config.get("do_normalize", True)
