"""s3prl's files read without running s3prl's code: hub entries, checkpoint URLs, upstream configs.

s3prl 0.4.18 imports APIs that torchaudio 2.9 removed (`patch_torchaudio_for_s3prl` fills them
in). Its hub entries, their released checkpoints' URLs and the feature-encoder spec of an upstream
checkpoint are read as data (`ast`, never evaluated); checkpoints load from local files only.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqa.core.extras import require
from sqa.models.ssl.files import existing, load_torch_file

# s3prl hub entries that take a user-given checkpoint instead of naming a released model.
_S3PRL_GENERIC_ENTRIES = ("wav2vec2_custom", "wav2vec2_local", "wav2vec2_url")

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
