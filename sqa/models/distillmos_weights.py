"""Distill-MOS's pretrained weights: the installed package's file, its tensors renamed to sqa's modules.

The file is found without importing the package and read as plain tensors; nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from sqa.core.extras import MissingExtraError

WEIGHTS = "distill_mos_v7.pt"
# Where the package's state_dict keeps the tensors of sqa's modules: sqa's prefix -> the package's.
_TRANSFORMER = "transformer_pool_attn."
_BACKBONE_PREFIXES = {
    "input_norm.": _TRANSFORMER + "norm_input.",
    "projection_norm.": _TRANSFORMER + "transformer.norm.",
    "projection.": _TRANSFORMER + "transformer.linear_proj.",
    "layers.": _TRANSFORMER + "transformer.transformer_encoder.layers.",
    "output_norm.": _TRANSFORMER + "norm_trans.",
}
_ATTENTION_PREFIXES = {"0.": _TRANSFORMER + "pool.linear1.", "2.": _TRANSFORMER + "pool.linear2."}
_OUTPUT_PREFIXES = {"": _TRANSFORMER + "pool.linear3."}


def package_weights_path() -> Path:
    """The weight file inside the installed `distillmos` package (found without importing it)."""
    spec = importlib.util.find_spec("distillmos")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(
            "the pretrained Distill-MOS weights need the Python package 'distillmos', which is not "
            "installed: pip install 'sqa[distillmos]' (or `bash scripts/setup.sh`, which installs "
            "every extra)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "weights" / WEIGHTS
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the installed distillmos package has no {WEIGHTS}")
    return path


def package_state_dict() -> dict[str, torch.Tensor]:
    """The package's pretrained tensors under their names in its own model (read as plain tensors)."""
    checkpoint = torch.load(package_weights_path(), map_location="cpu", weights_only=True)
    return dict(checkpoint["model"])


def _renamed(state: dict[str, torch.Tensor], prefixes: dict[str, str]) -> dict[str, torch.Tensor]:
    """The tensors of `state` under the package's `prefixes` (values), renamed to sqa's (keys).

    BatchNorm's update counters are left out: sqa's normalisations keep fixed statistics.
    """
    out = {}
    for ours, theirs in prefixes.items():
        for name, tensor in state.items():
            if name.startswith(theirs) and not name.endswith("num_batches_tracked"):
                out[ours + name.removeprefix(theirs)] = tensor
    return out


def backbone_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The package's tensors (`package_state_dict`) of the network before its head, named as sqa's."""
    out = _renamed(state, _BACKBONE_PREFIXES)
    for name, tensor in state.items():
        if name.startswith("cnn.cnn."):
            index, rest = name.removeprefix("cnn.cnn.").split(".", 1)
            # The package's CNN interleaves activations with its convolutions: conv i is entry 2·i.
            out[f"cnn.convs.{int(index) // 2}.{rest}"] = tensor
    return out


def attention_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The package's tensors (`package_state_dict`) of its head's attention, named as sqa's."""
    return _renamed(state, _ATTENTION_PREFIXES)


def output_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The package's tensors (`package_state_dict`) of its head's output layer, named as sqa's."""
    return _renamed(state, _OUTPUT_PREFIXES)
