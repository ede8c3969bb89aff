"""The released predictors' files read as sqa parts: the layouts `sqa-import` knows, key by key.

`singmos_pro` and `singmos_v1` are the state_dicts of the SingMOS-Pro authors' torch.hub entries,
`sheet` an SSLMOS checkpoint of SHEET with its config.yml (`sqa.exports.importers` documents
each layout). Weights are unpickled with `weights_only=True`; a file of another layout is a
`LayoutError` naming it and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

SAMPLE_RATE = 16000
SINGMOS_SSL = "ssl_model.ssl_model.upstream.model."
SHEET_SSL = "ssl_model.upstream.model."
# The s3prl upstreams of the SingMOS-Pro authors' torch.hub entries.
SINGMOS_UPSTREAMS = {"singmos_pro": "wav2vec2_large_ll60k", "singmos_v1": "wav2vec2_base_960"}
# torch.hub's singmos_pro scores every clip with domain ID 1 unless told otherwise.
SINGMOS_PRO_DEFAULT_DOMAIN = 1


class LayoutError(ValueError):
    """A released file does not have the layout its kind names."""


@dataclass
class Converted:
    """A released predictor in sqa terms: its s3prl upstream, backbone weights and the rest.

    `other` holds every weight outside the backbone under sqa's names (head, domain embedding).
    """

    upstream: str
    ssl: dict[str, torch.Tensor]
    other: dict[str, torch.Tensor]
    head_dim: int
    range_clip: bool
    domains: list[str]
    domain_dim: int | None = None


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """A released state_dict, or the "model" entry of a trainer checkpoint; never unpickles code."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; expected the released predictor's weights")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises UnpicklingError, KeyError, RuntimeError, ... on junk
        raise LayoutError(f"{path} is not a torch state_dict file: {error}") from error
    if isinstance(state, Mapping) and isinstance(state.get("model"), Mapping):
        state = state["model"]
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise LayoutError(f"{path} holds no state_dict of tensors (nor a checkpoint with one under 'model')")
    return dict(state)


def _split(state: dict[str, torch.Tensor], prefix: str, path: Path) -> tuple[dict, dict]:
    """(backbone weights without `prefix`, the remaining entries)."""
    ssl = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    if not ssl:
        raise LayoutError(f"{path} has no wav2vec2 weights under {prefix!r}; is it the right kind?")
    return ssl, {k: v for k, v in state.items() if not k.startswith(prefix)}


def _take(rest: dict[str, torch.Tensor], keys: list[str], path: Path, kind: str) -> list[torch.Tensor]:
    """The tensors of `keys`; any missing key, or any key left over, is an error naming the file."""
    missing = [k for k in keys if k not in rest]
    extra = sorted(set(rest) - set(keys))
    if missing or extra:
        raise LayoutError(
            f"{path} does not have the {kind} layout: missing {missing}, unexpected {extra[:8]}"
            + (" (branches such as pitch or judge embeddings are not imported)" if extra else "")
        )
    return [rest[k] for k in keys]


def convert_singmos_pro(path: Path) -> Converted:
    """The authors' singmos_pro entry: wav2vec2-large LV-60k, domain embedding, SSL-MOS head."""
    ssl, rest = _split(read_weights(path), SINGMOS_SSL, path)
    keys = ["domain_emb.weight", "decoder.net.0.weight", "decoder.net.0.bias"]
    keys += ["decoder.net.3.weight", "decoder.net.3.bias"]
    domain, w0, b0, w3, b3 = _take(rest, keys, path, "singmos_pro")
    num_ids = domain.shape[0]
    # The torch.hub default ID first, so sqa's default domain scores as torch.hub does.
    order = [SINGMOS_PRO_DEFAULT_DOMAIN] + [i for i in range(num_ids) if i != SINGMOS_PRO_DEFAULT_DOMAIN]
    other = {"head.0.weight": w0, "head.0.bias": b0, "head.3.weight": w3, "head.3.bias": b3}
    other["domain.embedding.weight"] = domain[order]
    return Converted(
        upstream=SINGMOS_UPSTREAMS["singmos_pro"],
        ssl=ssl,
        other=other,
        head_dim=w0.shape[0],
        range_clip=True,
        domains=[f"domain_id_{i}" for i in order],
        domain_dim=domain.shape[1],
    )


def convert_singmos_v1(path: Path) -> Converted:
    """The authors' singmos_v1 entry: wav2vec2-base, one Linear(D, 1) per frame, frames averaged.

    sqa's head (Linear, ReLU, Linear) computes it exactly with two hidden units:
    relu(w·x + b) − relu(−w·x − b) = w·x + b.
    """
    ssl, rest = _split(read_weights(path), SINGMOS_SSL, path)
    weight, bias = _take(rest, ["linear.weight", "linear.bias"], path, "singmos_v1 (use_lstm=False)")
    head = {
        "head.0.weight": torch.cat([weight, -weight]),
        "head.0.bias": torch.cat([bias, -bias]),
        "head.3.weight": torch.tensor([[1.0, -1.0]], dtype=weight.dtype),
        "head.3.bias": torch.zeros(1, dtype=weight.dtype),
    }
    return Converted(SINGMOS_UPSTREAMS["singmos_v1"], ssl, head, head_dim=2, range_clip=False, domains=[])


def read_sheet_config(path: Path) -> dict[str, Any]:
    """model_params of a SHEET config.yml, checked for what sqa can import."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; expected the SHEET model's config.yml")
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise LayoutError(f"{path} is not a plain YAML file: {error}") from error
    if not isinstance(config, dict) or config.get("model_type") != "SSLMOS":
        raise LayoutError(f"{path}: model_type must be SSLMOS, the only SHEET model sqa imports")
    params = config.get("model_params")
    if not isinstance(params, dict):
        raise LayoutError(f"{path}: no model_params mapping")
    rules = {
        "ssl_module": ("s3prl", "the SSL model must come from s3prl"),
        "mean_net_output_type": ("scalar", "only scalar outputs are imported"),
        "use_listener_modeling": (False, "listener modeling is not imported"),
        "ssl_model_layer_idx": (-1, "only the last SSL layer (-1) is imported"),
    }
    # SSLMOS's own default: no listener modeling.
    params = {"use_listener_modeling": False, **params}
    for key, (value, why) in rules.items():
        if params.get(key) != value:
            raise LayoutError(f"{path}: model_params.{key} is {params.get(key)!r}; {why}")
    if config.get("sampling_rate", SAMPLE_RATE) != SAMPLE_RATE:
        raise LayoutError(
            f"{path}: sampling_rate {config.get('sampling_rate')!r}; SHEET's SSL-MOS uses 16000"
        )
    return params


def convert_sheet(path: Path, config_path: Path) -> Converted:
    """A SHEET SSLMOS checkpoint: s3prl wav2vec2 and the range-clipped mean net."""
    params = read_sheet_config(config_path)
    ssl, rest = _split(read_weights(path), SHEET_SSL, path)
    keys = ["mean_net_dnn.net.0.weight", "mean_net_dnn.net.0.bias"]
    keys += ["mean_net_dnn.net.3.weight", "mean_net_dnn.net.3.bias"]
    w0, b0, w3, b3 = _take(rest, keys, path, "SHEET SSLMOS")
    head = {"head.0.weight": w0, "head.0.bias": b0, "head.3.weight": w3, "head.3.bias": b3}
    range_clip = params.get("mean_net_range_clipping", True)
    if not isinstance(range_clip, bool):
        raise LayoutError(f"{config_path}: model_params.mean_net_range_clipping must be true or false")
    return Converted(
        str(params.get("s3prl_name")), ssl, head, head_dim=w0.shape[0], range_clip=range_clip, domains=[]
    )
