"""Frames of a frozen backbone, computed once per clip and reused while it stays frozen.

While `finetune.freeze_backbone_steps` holds the backbone fixed (and in eval mode), its frames of
a clip are the same at every epoch, so a pretrained network costs one forward pass per clip
instead of one per step; on a CPU this is what makes a pretrained backbone usable on a small
corpus. Clips are told apart by their samples (a digest of the bytes), so the cache serves
whole clips (`data.max_train_seconds` null or longer than the clips) and validation clips; a
random training crop is another clip, computed and cached anew. Backbones keep the contract that
a clip's frames alone equal its frames in a padded batch, so computing the missing clips of a
batch together is exact.

A `FrameStore` shares caches between modules: the default run's candidates
(`sqa.training.candidates`) train several models on the same clips, two of them over the same
frozen pretrained network, and test and validate each again; `sqa-bench` scores several exports
and an ensemble's members through one store. Modules whose backbones have the same fingerprint
get one cache, so the network passes each clip once for all of them. The fingerprint is
everything that changes a backbone's frames: every parameter and buffer, and its forward
configuration (`forward_configuration`): the class and public attributes of every module in its
tree, its config dataclass, flags such as wav2vec2's `normalize` and the training mode included.
Attributes whose names begin with `_` are left out on purpose: they are a module's bookkeeping
(PyTorch's registries and hooks, Distill-MOS's kept fronts), which changes as it runs without
changing a frame, and would keep two equal backbones from ever sharing (docs/caching.md).

Filling the cache is the slow part of such a run (minutes on a CPU, before the first validation),
so it says so when it starts and how far it is every `PROGRESS_SECONDS`.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import logging
import numbers
import time
import types
from typing import Any

import torch
from torch import nn

from sqa.core.content_key import content_key
from sqa.core.prediction import Prediction

log = logging.getLogger(__name__)

# How often filling the cache logs its progress.
PROGRESS_SECONDS = 10.0


def configuration_value(value: Any) -> Any:
    """`value` as JSON: scalars, enum members and functions as themselves, containers item by item.

    Dataclasses (a module's `config`) are containers too. Anything else (a tensor that is no
    buffer, a library's config object, a partial) stands for its type alone: what it changes shows
    in the modules built from it, and its value is not read.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__qualname__}.{value.name}"
    # An activation kept as a function (nn.TransformerEncoderLayer's) changes the frames.
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return f"{getattr(value, '__module__', None)}.{value.__qualname__}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: configuration_value(getattr(value, field.name)) for field in dataclasses.fields(value)
        }
    if isinstance(value, dict):
        return {str(key): configuration_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [configuration_value(item) for item in value]
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def forward_configuration(module: nn.Module) -> dict[str, dict[str, Any]]:
    """Per module of the tree (by name): its class and public attributes, e.g. config, normalize, training.

    Names beginning with `_` are bookkeeping, not configuration: PyTorch's parameter and hook
    registries, and state a module keeps while it runs (Distill-MOS's kept fronts and their byte
    count), which would otherwise make two equal backbones differ once one of them has run.
    """
    return {
        name: {
            "class": f"{type(sub).__module__}.{type(sub).__qualname__}",
            **{
                key: configuration_value(value) for key, value in vars(sub).items() if not key.startswith("_")
            },
        }
        for name, sub in module.named_modules()
    }


def fingerprint(module: nn.Module) -> bytes:
    """A digest of what a module's output depends on: its forward configuration, parameters and buffers."""
    configuration = json.dumps(forward_configuration(module), sort_keys=True)
    digest = hashlib.blake2b(configuration.encode(), digest_size=16)
    # Buffers that are not saved (a filterbank made from the settings) shape the frames too.
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        # As bytes, whatever the dtype (numpy has no bfloat16).
        digest.update(tensor.detach().to("cpu").reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return digest.digest()


class FrameCache:
    """Backbone frames by clip content, up to `max_bytes` of frames (kept on the CPU)."""

    def __init__(self, max_bytes: int, progress_seconds: float = PROGRESS_SECONDS) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.frames_of: dict[bytes, torch.Tensor] = {}
        self.hits = 0
        self.misses = 0
        self.progress_seconds = progress_seconds
        # The clips the run will pass through it (its corpus: training, validation, test; None: not known).
        self.expected: int | None = None
        self._started: float | None = None
        self._said = 0.0

    def _progress(self, computing: int) -> None:
        """Log the start of filling, then the clips computed so far at most every `progress_seconds`."""
        now = time.monotonic()
        of = f" of about {self.expected}" if self.expected else ""
        if self._started is None:
            self._started = self._said = now
            log.info(
                "frame cache: each clip%s passes once through the frozen backbone, its frames then "
                "reused; this first pass is the slow part (progress every %.0f s)",
                f" ({self.expected})" if self.expected else "",
                self.progress_seconds,
            )
        elif now - self._said >= self.progress_seconds:
            self._said = now
            log.info(
                "frame cache: %d clip(s)%s through the backbone, %.0f s, %.1f MB kept; computing %d more",
                self.misses - computing,
                of,
                now - self._started,
                self.bytes / 2**20,
                computing,
            )

    @torch.no_grad()
    def frames(
        self, backbone: nn.Module, wav: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Frames (B, T, D) and frame_lengths (B,) of a padded batch wav (B, N), lengths (B,)."""
        keys = [content_key(wav[i, : int(n)]) for i, n in enumerate(lengths)]
        found = {i: self.frames_of[k] for i, k in enumerate(keys) if k in self.frames_of}
        missing = [i for i in range(len(keys)) if i not in found]
        self.hits += len(found)
        self.misses += len(missing)
        if missing:
            self._progress(len(missing))
            index = torch.tensor(missing, device=wav.device)
            sub_lengths = lengths[index]
            new, new_lengths = backbone(wav[index, : int(sub_lengths.max())], sub_lengths)
            for j, i in enumerate(missing):
                clip = new[j, : int(new_lengths[j])].to("cpu")
                found[i] = clip
                size = clip.numel() * clip.element_size()
                if self.bytes + size <= self.max_bytes:
                    self.frames_of[keys[i]] = clip
                    self.bytes += size
        clips = [found[i] for i in range(len(keys))]
        frame_lengths = torch.tensor([c.shape[0] for c in clips], device=wav.device)
        frames = nn.utils.rnn.pad_sequence(clips, batch_first=True).to(wav.device)
        return frames, frame_lengths

    def clear(self) -> None:
        """Forget every clip (the backbone is about to change)."""
        self.frames_of.clear()
        self.bytes = 0


class FrameStore:
    """Frame caches by backbone fingerprint: modules whose backbones give the same frames share one cache."""

    def __init__(self) -> None:
        self.caches: dict[bytes, FrameCache] = {}

    def cache_for(self, backbone: nn.Module, max_bytes: int) -> FrameCache:
        """The cache of `backbone` as it is now, weights and configuration (made of `max_bytes` if none)."""
        return self.caches.setdefault(fingerprint(backbone), FrameCache(max_bytes))


class FrameSource:
    """Where `MOSModule` takes a batch's frames from: its cache, the shared store, or the backbone.

    A mixin of `sqa.training.lit_module.MOSModule`, which holds what it reads: `predictor`,
    `frame_cache`, `frame_store`, `optimizer_factory`, `freeze_backbone_steps`, the cache budgets
    and Lightning's `trainer`, `training` and `global_step`.
    """

    def _members_cached(self) -> bool:
        """Whether an ensemble's members take their frames from the shared store.

        Only in an evaluation-only module (no optimizer: no member ever learns) given a store, in a
        single process: a member over the same frozen network as a candidate then costs no pass.
        """
        return (
            self.frame_store is not None
            and self.optimizer_factory is None
            and bool(self._cache_bytes)
            and hasattr(self.predictor, "combine")
            and self.trainer.world_size == 1
        )

    def _member_prediction(self, member: torch.nn.Module, batch: dict[str, Any], args: tuple) -> Prediction:
        """One ensemble member's prediction of a batch; members that score frames take them from the store."""
        if not hasattr(member, "score_frames"):
            return member(batch["wav"], batch["lengths"], *args)
        # Looked up once per member: a fingerprint reads every weight.
        cache = self._member_caches.get(id(member))
        if cache is None:
            cache = self._member_caches[id(member)] = self.frame_store.cache_for(
                member.backbone, self._cache_bytes
            )
        frames, frame_lengths = cache.frames(member.backbone, batch["wav"], batch["lengths"])
        return member.score_frames(frames, frame_lengths, batch["lengths"], *args)

    def share_frames(self, store: FrameStore) -> None:
        """Before training: take frames from `store`'s cache of this backbone, shared with other modules."""
        self.frame_store = store
        self.frame_cache = None

    def _frozen(self) -> bool:
        """Whether the backbone is frozen at this step (`freeze_backbone_steps`)."""
        return self._trainer is not None and self.global_step < self.freeze_backbone_steps

    def _untouched(self) -> bool:
        """Whether the backbone still has the weights it started with (and is in eval mode when used).

        A training step is frozen while global_step < freeze_backbone_steps; an evaluation after
        step freeze_backbone_steps still sees the starting backbone, as does a module with no optimizer.
        A later trainer starts at step 0 again: the cache itself keeps that from serving stale frames
        (an own cache is emptied at every step the backbone learns in, a shared one is found anew
        by the backbone's fingerprint).
        """
        if self.optimizer_factory is None:
            return True
        if self.training:
            return self._frozen()
        return self.global_step <= self.freeze_backbone_steps

    def _cached(self) -> bool:
        """Whether frames come from the frame cache: an untouched backbone, in a single process.

        Only a predictor that scores frames (`score_frames`) has one backbone to cache; an ensemble's
        members go through the store member by member (`_members_cached`).
        """
        if not self._cache_bytes or self.trainer.world_size != 1 or not self._untouched():
            return False
        if not hasattr(self.predictor, "score_frames"):
            return False
        if self.frame_cache is None:
            self.frame_cache = self.frame_store.cache_for(self.predictor.backbone, self._cache_bytes)
            self.frame_cache.expected = self.frame_cache.expected or self._expected_clips
        return True

    def keep_fronts(self, max_bytes: int) -> None:
        """Let the backbone keep its fixed front per segment, up to `max_bytes` (0: free), where it can."""
        keep_fronts = getattr(getattr(self.predictor, "backbone", None), "keep_fronts", None)
        if callable(keep_fronts):
            keep_fronts(max_bytes)

    def _backbone_will_learn(self) -> bool:
        """Whether this fit has steps in which the backbone learns (after `freeze_backbone_steps`)."""
        if self.optimizer_factory is None:
            return False
        # -1: no step limit (max_epochs ends the run), so it may run past the frozen steps.
        last = self.trainer.max_steps
        return last == -1 or self.freeze_backbone_steps < last
