"""Reading other libraries' files: checkpoint loaders, input-contract readers and key bridges.

Everything here reads local files only, unpickles with `weights_only=True`, and raises an error
naming the file and what was expected there. s3prl's files are read in `s3prl_files`, the shared
file checks are in `files`; their names stay importable from here.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sqa.models.ssl.files import existing, load_torch_file, load_weights_into
from sqa.models.ssl.s3prl_files import (
    MAX_CONV_LAYERS,
    conv_layers,
    patch_torchaudio_for_s3prl,
    read_s3prl_checkpoint,
    s3prl_cached_checkpoint,
    s3prl_checkpoint_url,
    s3prl_configs,
    s3prl_upstream_names,
)

# Every public name this module had, those now in `files` and `s3prl_files` included.
__all__ = [
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
]

# fairseq's single positional convolution, "encoder.pos_conv.0.{weight_g,weight_v,bias}".
_FAIRSEQ_POS_CONV = re.compile(r"^encoder\.pos_conv\.0\.(?=[a-z])")


def load_torchaudio_checkpoint(model: nn.Module, checkpoint: str, arch: str) -> None:
    """Load a torchaudio wav2vec2 state_dict file into `model` (torchaudio arch `arch`)."""
    expected = f"a torch.save(model.state_dict()) file of a torchaudio wav2vec2, arch {arch!r}"
    path = existing(checkpoint, expected)
    state = load_torch_file(path, expected)
    if not isinstance(state, Mapping):
        raise ValueError(f"{path} holds a {type(state).__name__}, expected a torchaudio state_dict")
    load_weights_into(model, state, path, f"torchaudio arch {arch!r}")


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
