"""sqa-import: released predictors in their published key layouts, rebuilt and scored by sqa.

Each test builds the released model's module tree as its public code defines it (the SingMOS-Pro
authors' singmos_pro.py / singmos_v1.py, SHEET's sslmos.py: an s3prl `S3PRLUpstream` plus their
heads) at tiny size, saves its state_dict as the release does, imports it, and compares sqa's
score of a clip with that module's own forward: the mean over s3prl's `S3PRLUpstream` output of
ceil(N / 320) frames, whose last real frame repeats, which the import records as its pooling. The
frame scores are compared one by one as well.
"""

from __future__ import annotations

import ast
import csv
import json
import logging
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from sqa.exports import importers
from sqa.exports.format import ExportError, load_export
from sqa.models.ssl import S3prlWav2Vec2, patch_torchaudio_for_s3prl
from sqa.scoring.scorer import Scorer
from tests.models.test_ssl_sources import FAIRSEQ_TINY, fairseq_reference_model

# Both hubs and s3prl's downloads are unreachable: a connection attempt fails the test.
pytestmark = pytest.mark.usefixtures("no_network")

# The base layout (GroupNorm front end, post-LN transformer), as wav2vec2_base_960.
FAIRSEQ_TINY_BASE = {
    **FAIRSEQ_TINY,
    "extractor_mode": "default",
    "conv_bias": False,
    "layer_norm_first": False,
}
SAMPLES = 21_000  # not a multiple of 320: the s3prl output gets a repeated last frame


def upstream_file(path: Path, model_cfg: dict, normalize: bool) -> Path:
    """An s3prl-converted wav2vec2 checkpoint, the file s3prl's hub entries load."""
    model = fairseq_reference_model(model_cfg)
    state = {"task_cfg": {"normalize": normalize}, "model_cfg": model_cfg, "model_weight": model.state_dict()}
    torch.save(state, path)
    return path


def saved_on_cuda(path: Path, out: Path) -> Path:
    """`path` (a torch.save file) as saved from a GPU: its storages' location is "cuda:0"."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("/data.pkl"):
                # The location string as pickle protocol 2 writes it (BINUNICODE, 4-byte length).
                data, count = re.subn(rb"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0", data)
                assert count > 0
            dst.writestr(info, data)
    return out


def s3prl_upstream(path: Path) -> nn.Module:
    patch_torchaudio_for_s3prl()
    from s3prl.nn import S3PRLUpstream

    return S3PRLUpstream("wav2vec2_local", path_or_url=str(path))


class SSLModel(nn.Module):
    """singmos_pro.py / singmos_v1.py `SSL_Model`: the last hidden state of S3PRLUpstream."""

    def __init__(self, ssl_model: nn.Module) -> None:
        super().__init__()
        self.ssl_model = ssl_model

    def forward(self, wav: torch.Tensor, wav_length: torch.Tensor) -> torch.Tensor:
        features, _ = self.ssl_model(wav, wav_length)
        return features[-1]


class ProjectionLayer(nn.Module):
    """singmos_pro.py `Projection_Layer` / SHEET's `Projection` (scalar output, range clip)."""

    def __init__(self, in_dim: int, hidden_dim: int, range_clip: bool = True) -> None:
        super().__init__()
        self.range_clip = range_clip
        self.proj = nn.Tanh()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Dropout(0.3), nn.Linear(hidden_dim, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = self.net(x)
        return self.proj(output) * 2.0 + 3 if self.range_clip else output


class SingMOSPro(nn.Module):
    """singmos_pro.py `MOS_Predictor` with use_domain_id=True, domain_num=6 (the hub entry)."""

    def __init__(self, upstream: Path, ssl_dim: int, hdim: int = 128, dnn_dim: int = 64) -> None:
        super().__init__()
        self.ssl_model = SSLModel(s3prl_upstream(upstream))
        self.domain_emb = nn.Embedding(6, hdim)
        self.decoder = ProjectionLayer(ssl_dim + hdim, dnn_dim)

    def frame_scores(self, wav: torch.Tensor, domain_id: int) -> torch.Tensor:
        x = self.ssl_model(wav, torch.tensor([wav.shape[1]]))
        domain = self.domain_emb(torch.tensor([domain_id]))[:, None, :].expand(-1, x.shape[1], -1)
        return self.decoder(torch.cat((x, domain), dim=-1)).squeeze(-1)

    def forward(self, wav: torch.Tensor, domain_id: int = 1) -> torch.Tensor:
        """`MOS_Predictor.forward` of one clip (1, N): torch.mean of the frame scores, dim 1."""
        return torch.mean(self.frame_scores(wav, domain_id), dim=1)


class SingMOSv1(nn.Module):
    """singmos_v1.py `MOS_Predictor` with use_lstm=False: Linear(D, 1) per frame."""

    def __init__(self, upstream: Path, ssl_dim: int) -> None:
        super().__init__()
        self.ssl_model = SSLModel(s3prl_upstream(upstream))
        self.linear = nn.Linear(ssl_dim, 1)

    def frame_scores(self, wav: torch.Tensor) -> torch.Tensor:
        return self.linear(self.ssl_model(wav, torch.tensor([wav.shape[1]]))).squeeze(-1)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        """`MOS_Predictor.forward` of one clip (1, N): torch.mean of the frame scores, dim 1."""
        return torch.mean(self.frame_scores(wav), dim=1)


class SheetSSLMOS(nn.Module):
    """SHEET's `SSLMOS` (ssl_module s3prl, layer -1, scalar range-clipped mean net)."""

    def __init__(self, upstream: Path, ssl_dim: int, dnn_dim: int = 64) -> None:
        super().__init__()
        self.ssl_model = s3prl_upstream(upstream)
        self.mean_net_dnn = ProjectionLayer(ssl_dim, dnn_dim)

    def frame_scores(self, wav: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.ssl_model(wav, torch.tensor([wav.shape[1]]))
        return self.mean_net_dnn(hidden[-1]).squeeze(-1)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        """`SSLMOS.mean_net_inference` of one clip (1, N): torch.mean of the frame scores, dim 1."""
        return torch.mean(self.frame_scores(wav), dim=1)


def clip() -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(SAMPLES) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(SAMPLES)).astype(np.float32)


def reference_score(frame_scores: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The authors' clip score (torch.mean over s3prl's padded output) and the model's real frames."""
    real = (SAMPLES - 400) // 320 + 1
    assert frame_scores.shape[1] == -(-SAMPLES // 320) == real + 1
    torch.testing.assert_close(frame_scores[:, -1], frame_scores[:, -2], atol=1e-6, rtol=0)
    return float(frame_scores[0].mean()), frame_scores[0, :real]


def check_export(
    export: Path, model: nn.Module, expected_frames: torch.Tensor, expected: float, **score
) -> None:
    scorer = Scorer(export, **score)
    assert scorer.score_waveforms([clip()])[0] == pytest.approx(expected, abs=1e-4)
    predictor, config, _ = load_export(export)
    # Plain data that names no file: the architecture and its input contract only.
    text = (export / "config.yaml").read_text()
    assert "${" not in text and not re.search(r"^\s*(checkpoint|upstream|path):", text, re.MULTILINE)
    wav = torch.from_numpy(clip())[None]
    domain = torch.full((1,), scorer.domain)
    with torch.no_grad():
        frames = predictor(wav, torch.tensor([SAMPLES]), domain).frame_scores[0]
    torch.testing.assert_close(frames, expected_frames, atol=1e-4, rtol=0)


@torch.no_grad()
def test_singmos_pro_release_imports_and_scores_like_its_own_forward(tmp_path: Path) -> None:
    upstream = upstream_file(tmp_path / "wav2vec_vox_new.pt", FAIRSEQ_TINY, normalize=True)
    torch.manual_seed(3)
    released = SingMOSPro(upstream, ssl_dim=256).eval()
    torch.save(released.state_dict(), tmp_path / "singmos_pro.pth")
    out = tmp_path / "export"
    args = [
        "singmos_pro",
        str(tmp_path / "singmos_pro.pth"),
        str(out),
        "--upstream-checkpoint",
        str(upstream),
    ]
    assert importers.main(args) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["model"]["backbone"]["normalize"] is True  # from the upstream's task_cfg
    assert config["domains"][0] == "domain_id_1" and sorted(config["domains"]) == [
        f"domain_id_{i}" for i in range(6)
    ]
    wav = torch.from_numpy(clip())[None]
    # sqa's default domain is torch.hub's default, ID 1; any other ID by its name.
    for domain_id, score in ((1, {}), (4, {"domain": "domain_id_4"}), (0, {"domain": "domain_id_0"})):
        expected, frames = reference_score(released.frame_scores(wav, domain_id))
        check_export(out, released, frames, expected, **score)


@torch.no_grad()
def test_singmos_v1_release_imports_exactly_with_a_linear_head(tmp_path: Path) -> None:
    upstream = upstream_file(tmp_path / "wav2vec_small.pt", FAIRSEQ_TINY_BASE, normalize=False)
    torch.manual_seed(4)
    released = SingMOSv1(upstream, ssl_dim=256).eval()
    with torch.no_grad():
        released.linear.bias.fill_(3.0)  # a trained head's offset, far from zero
    torch.save(released.state_dict(), tmp_path / "singmos_v1.pt")
    out = tmp_path / "export"
    importers.import_predictor(
        "singmos_v1", tmp_path / "singmos_v1.pt", out, upstream_checkpoint=str(upstream)
    )
    assert yaml.safe_load((out / "config.yaml").read_text())["model"]["range_clip"] is False
    expected, frames = reference_score(released.frame_scores(torch.from_numpy(clip())[None]))
    check_export(out, released, frames, expected)
    # An existing export is kept unless the import is told to overwrite it.
    with pytest.raises(ExportError, match="already exists"):
        importers.import_predictor(
            "singmos_v1", tmp_path / "singmos_v1.pt", out, upstream_checkpoint=str(upstream)
        )
    importers.import_predictor(
        "singmos_v1", tmp_path / "singmos_v1.pt", out, upstream_checkpoint=str(upstream), overwrite=True
    )
    check_export(out, released, frames, expected)
    # Releases saved from a GPU (weights and upstream) import on a machine without one.
    weights = saved_on_cuda(tmp_path / "singmos_v1.pt", tmp_path / "gpu.pt")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(weights, weights_only=True)
    gpu_upstream = saved_on_cuda(upstream, tmp_path / "gpu_upstream.pt")
    importers.import_predictor("singmos_v1", weights, tmp_path / "gpu", upstream_checkpoint=str(gpu_upstream))
    check_export(tmp_path / "gpu", released, frames, expected)


@pytest.mark.parametrize("trainer_checkpoint", [False, True])
@torch.no_grad()
def test_sheet_release_imports_from_its_config_and_s3prl_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trainer_checkpoint: bool
) -> None:
    from s3prl.util import download

    upstream = upstream_file(tmp_path / "upstream.pt", FAIRSEQ_TINY, normalize=True)
    torch.manual_seed(5)
    released = SheetSSLMOS(upstream, ssl_dim=256).eval()
    state = released.state_dict()
    if trainer_checkpoint:  # what SHEET's trainer writes (checkpoint-<N>steps.pkl)
        state = {"model": state, "optimizer": {"state": {}, "param_groups": []}, "steps": 100, "epochs": 1}
    torch.save(state, tmp_path / "checkpoint-100steps.pkl")
    config = {
        "model_type": "SSLMOS",
        "model_input": "waveform",
        "sampling_rate": 16000,
        "inference_mode": "mean_net",
        "model_params": {
            "ssl_module": "s3prl",
            "s3prl_name": "wav2vec2_large_ll60k",
            "ssl_model_output_dim": 256,
            "ssl_model_layer_idx": -1,
            "mean_net_dnn_dim": 64,
            "mean_net_output_type": "scalar",
            "mean_net_range_clipping": True,
            "use_listener_modeling": False,
            "use_mean_listener": False,
        },
    }
    (tmp_path / "config.yml").write_text(yaml.safe_dump(config))
    # The architecture from s3prl's cache, where torch.hub use of SHEET left the upstream.
    monkeypatch.setattr(download, "_download_dir", tmp_path / "s3prl-cache")
    url = "https://huggingface.co/s3prl/converted_ckpts/resolve/main/wav2vec_vox_new.pt"
    cached = Path(download._urls_to_filepaths(url, download=False))
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(upstream.read_bytes())
    out = tmp_path / "export"
    args = [
        "sheet",
        str(tmp_path / "checkpoint-100steps.pkl"),
        str(out),
        "--sheet-config",
        str(tmp_path / "config.yml"),
    ]
    assert importers.main(args) == 0
    expected, frames = reference_score(released.frame_scores(torch.from_numpy(clip())[None]))
    check_export(out, released, frames, expected)


# fairseq's AudioPretrainingConfig as wav2vec2 large LV-60k's pretraining recorded it
# (examples/wav2vec/config/pretraining/wav2vec2_large_librivox.yaml over the dataclass defaults);
# s3prl's converter stores it verbatim as task_cfg. Its crop sizes exceed an export's bounds.
FAIRSEQ_PRETRAINING_TASK = {
    "_name": "audio_pretraining",
    "data": "/data/librilight/manifests",
    "labels": None,
    "binarized_dataset": False,
    "sample_rate": 16000,
    "normalize": True,
    "enable_padding": False,
    "max_sample_size": 320000,
    "min_sample_size": 32000,
    "num_batch_buckets": 0,
    "precompute_mask_indices": False,
    "inferred_w2v_config": None,
    "tpu": False,
    "text_compression_level": "none",
}


@torch.no_grad()
def test_an_upstream_with_fairseqs_pretraining_task_config_imports_an_export_that_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from s3prl.util import download

    import sqa
    from sqa.models.ssl.interop import s3prl_checkpoint_url

    # s3prl's cache entry as its converter (load_and_convert_fairseq_ckpt) writes it: fairseq's
    # task and model configs verbatim beside the weights; the model is tiny.
    monkeypatch.setattr(download, "_download_dir", tmp_path / "s3prl-cache")
    url = s3prl_checkpoint_url(importers.SINGMOS_UPSTREAMS["singmos_pro"])
    cached = Path(download._urls_to_filepaths(url, download=False))
    cached.parent.mkdir(parents=True, exist_ok=True)
    model_cfg = {"_name": "wav2vec2", **FAIRSEQ_TINY}
    weights = fairseq_reference_model(model_cfg).state_dict()
    converted = {"task_cfg": FAIRSEQ_PRETRAINING_TASK, "model_cfg": model_cfg, "model_weight": weights}
    torch.save(converted, cached)
    torch.manual_seed(7)
    released = SingMOSPro(cached, ssl_dim=256).eval()
    release = tmp_path / "singmos_pro.pth"
    torch.save(released.state_dict(), release)
    out = tmp_path / "export"
    assert importers.main(["singmos_pro", str(release), str(out)]) == 0
    # Of the task config the export keeps what scoring reads.
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["model"]["backbone"]["task_config"] == {"normalize": True}
    assert config["model"]["backbone"]["normalize"] is True
    # sqa.load scores a clip as the predictor the import builds in memory does.
    wav = (0.1 * np.random.default_rng(8).standard_normal(12_345)).astype(np.float32)
    predictor = importers.build_predictor(importers.convert_singmos_pro(release), None, release)
    domain = torch.zeros(1, dtype=torch.long)  # the export's default domain, torch.hub's ID 1
    expected = float(predictor(torch.from_numpy(wav)[None], torch.tensor([wav.size]), domain).score[0])
    assert sqa.load(out).score(wav, 16000) == pytest.approx(expected, abs=1e-5)
    # And as the authors' forward does, frame by frame.
    reference, frames = reference_score(released.frame_scores(torch.from_numpy(clip())[None], 1))
    check_export(out, released, frames, reference)
    # Exports written before this import kept the task config whole: those that held only
    # `normalize`, or small keys besides, load and score the same.
    for old in ({"normalize": True}, {"normalize": True, "sample_rate": 16000, "enable_padding": False}):
        config["model"]["backbone"]["task_config"] = old
        (out / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        assert sqa.load(out).score(wav, 16000) == pytest.approx(expected, abs=1e-5)
        assert load_export(out)[0].backbone.export_config()["task_config"] == {"normalize": True}


def test_import_errors_name_the_file_and_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = upstream_file(tmp_path / "upstream.pt", FAIRSEQ_TINY, normalize=True)
    torch.manual_seed(6)
    state = SingMOSPro(upstream, ssl_dim=256).state_dict()
    base = ["--upstream-checkpoint", str(upstream)]
    # A pitch branch the release does not have: refused, not silently dropped.
    torch.save({**state, "pitch_hist_proj.weight": torch.zeros(128, 120)}, tmp_path / "pitch.pth")
    assert importers.main(["singmos_pro", str(tmp_path / "pitch.pth"), str(tmp_path / "a"), *base]) == 1
    err = capsys.readouterr().err
    assert str(tmp_path / "pitch.pth") in err and "pitch_hist_proj.weight" in err
    # The SingMOS-Pro file imported as SHEET: no SHEET keys.
    (tmp_path / "config.yml").write_text(
        yaml.safe_dump(
            {"model_type": "SSLMOS", "model_params": {"ssl_module": "s3prl", "s3prl_name": "wavlm_large"}}
        )
    )
    torch.save(state, tmp_path / "pro.pth")
    sheet = [
        "sheet",
        str(tmp_path / "pro.pth"),
        str(tmp_path / "b"),
        "--sheet-config",
        str(tmp_path / "config.yml"),
    ]
    assert importers.main([*sheet, *base]) == 1
    assert "mean_net_output_type" in capsys.readouterr().err
    params = {
        "ssl_module": "s3prl",
        "s3prl_name": "wavlm_large",
        "ssl_model_layer_idx": -1,
        "mean_net_output_type": "scalar",
    }
    (tmp_path / "config.yml").write_text(yaml.safe_dump({"model_type": "SSLMOS", "model_params": params}))
    assert importers.main([*sheet, *base]) == 1
    assert "ssl_model.upstream.model." in capsys.readouterr().err
    # A WavLM SHEET model: sqa has no WavLM backbone.
    renamed = {k.replace("ssl_model.ssl_model.", "ssl_model."): v for k, v in state.items()}
    renamed = {k.replace("decoder.", "mean_net_dnn."): v for k, v in renamed.items() if "domain_emb" not in k}
    torch.save(renamed, tmp_path / "wavlm.pkl")
    sheet[1] = str(tmp_path / "wavlm.pkl")
    assert importers.main([*sheet, *base]) == 1
    assert "'wavlm_large' is not a wav2vec2 model" in capsys.readouterr().err
    # Weights for another architecture than the upstream's: one layer fewer (16 tensors left over),
    # one more (16 missing) or narrower (every layer's tensors of another shape). Each list names
    # the first 8, sorted.
    layouts = {
        "fewer": ({"encoder_layers": 1}, "unexpected", ".layers.1."),
        "more": ({"encoder_layers": 3}, "missing", ".layers.2."),
        "narrower": ({"encoder_embed_dim": 192}, "different shapes", "backbone.model."),
    }
    for name, (change, listed, key) in layouts.items():
        other = upstream_file(tmp_path / f"{name}.pt", {**FAIRSEQ_TINY, **change}, normalize=True)
        args = [
            "singmos_pro",
            str(tmp_path / "pro.pth"),
            str(tmp_path / name),
            "--upstream-checkpoint",
            str(other),
        ]
        assert importers.main(args) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith(
            f"sqa-import: {tmp_path / 'pro.pth'} does not match the wav2vec2_large_ll60k architecture"
        )
        found = re.search(r"missing (\[.*?\]), unexpected (\[.*?\]), different shapes (\[.*?\])$", err)
        lists = dict(
            zip(
                ("missing", "unexpected", "different shapes"),
                map(ast.literal_eval, found.groups()),
                strict=True,
            )
        )
        named = lists.pop(listed)
        assert len(named) == 8 and named == sorted(named) and all(key in k for k in named), named
        assert all(v == [] for v in lists.values()), lists
    assert importers.main(["singmos_pro", str(tmp_path / "missing.pth"), str(tmp_path / "d"), *base]) == 1
    assert "missing.pth does not exist" in capsys.readouterr().err
    # An existing export is never overwritten without --overwrite.
    capsys.readouterr()
    assert importers.main(["singmos_pro", str(tmp_path / "pro.pth"), str(tmp_path / "e"), *base]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'e'}\n"
    before = (tmp_path / "e" / "model.pt").read_bytes()
    assert importers.main(["singmos_pro", str(tmp_path / "pro.pth"), str(tmp_path / "e"), *base]) == 1
    assert (
        "already exists" in capsys.readouterr().err and (tmp_path / "e" / "model.pt").read_bytes() == before
    )
    assert json.loads((tmp_path / "e" / "metrics.json").read_text()) == {}
    assert isinstance(load_export(tmp_path / "e")[0].backbone, S3prlWav2Vec2)
    # --overwrite replaces it. Run as a console script (no logging set up yet), sqa's notes are
    # shown at INFO as plain lines.
    monkeypatch.setattr(logging.root, "handlers", [])
    monkeypatch.setattr(logging.root, "level", logging.WARNING)
    overwrite = ["singmos_pro", str(tmp_path / "pro.pth"), str(tmp_path / "e"), *base, "--overwrite"]
    assert importers.main(overwrite) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "normalize=" in line]
    assert notes and all(re.fullmatch(r"[^:]+: normalize=True \(.+\)", line) for line in notes), notes


# Clips of 1-4 s at 16 kHz: N mod 320 of 40 gives s3prl two repeated frames, the others one.
REFERENCE_SAMPLES = (16_040, 27_200, 40_321, 64_000)
# And one clip at 44.1 kHz, which sqa resamples (soxr) before the model sees it.
HIGH_RATE, HIGH_RATE_SAMPLES = 44_100, 97_020
SHEET_CONFIG = {
    "model_type": "SSLMOS",
    "sampling_rate": 16000,
    "model_params": {
        "ssl_module": "s3prl",
        "ssl_model_layer_idx": -1,
        "mean_net_output_type": "scalar",
        "mean_net_range_clipping": True,
    },
}
# layout: (sqa-import kind, upstream model_cfg, its task_cfg normalize, SHEET's s3prl_name).
LAYOUTS = {
    "singmos_pro": ("singmos_pro", FAIRSEQ_TINY, True, None),
    "singmos_v1": ("singmos_v1", FAIRSEQ_TINY_BASE, False, None),
    "sheet_wav2vec2_large": ("sheet", FAIRSEQ_TINY, True, "wav2vec2_large_ll60k"),
    "sheet_wav2vec2_base": ("sheet", FAIRSEQ_TINY_BASE, False, "wav2vec2"),
}


def reference_clips() -> list[tuple[np.ndarray, int]]:
    """Sung-like tones with noise, (samples, rate): four at 16 kHz and one at 44.1 kHz."""
    rng = np.random.default_rng(11)
    clips = []
    for n, rate in [*((n, 16000) for n in REFERENCE_SAMPLES), (HIGH_RATE_SAMPLES, HIGH_RATE)]:
        t = np.arange(n) / rate
        tone = 0.3 * np.sin(2 * np.pi * (200 + 40 * len(clips)) * t * (1 + 0.01 * np.sin(2 * np.pi * 5 * t)))
        clips.append(((tone + 0.03 * rng.standard_normal(n)).astype(np.float32), rate))
    return clips


def released_model(layout: str, tmp_path: Path) -> tuple[nn.Module, Path, list[str]]:
    """The authors' model of `layout`, perturbed from its init, saved as released; the import args."""
    kind, model_cfg, normalize, s3prl_name = LAYOUTS[layout]
    upstream = upstream_file(tmp_path / "upstream.pt", model_cfg, normalize)
    torch.manual_seed(21)
    model = {"singmos_pro": SingMOSPro, "singmos_v1": SingMOSv1, "sheet": SheetSSLMOS}[kind](
        upstream, ssl_dim=256
    )
    with torch.no_grad():
        # Fine-tuned weights differ from the upstream's: every tensor moves by about 1 %.
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.01 * tensor.std().nan_to_num() * torch.randn_like(tensor))
        if kind == "singmos_v1":
            model.linear.bias.fill_(3.0)
    model.eval()
    weights = tmp_path / "released.pt"
    torch.save(model.state_dict(), weights)
    args = [kind, str(weights), str(tmp_path / "export"), "--upstream-checkpoint", str(upstream)]
    if kind == "sheet":
        config = {**SHEET_CONFIG, "model_params": {**SHEET_CONFIG["model_params"], "s3prl_name": s3prl_name}}
        config["model_params"]["ssl_model_output_dim"] = 256
        (tmp_path / "config.yml").write_text(yaml.safe_dump(config))
        args += ["--sheet-config", str(tmp_path / "config.yml")]
    return model, tmp_path / "export", args


def sqa_scores(export: Path, clips: list, batch_size: int, tmp_path: Path, domain: str | None, pooling=None):
    """Each clip's score through `sqa.load(...).score` and through `sqa-score`'s files, in order."""
    import soundfile as sf

    import sqa
    from sqa.scoring import cli as score

    scorer = sqa.load(export, batch_size=batch_size, domain=domain, pooling=pooling)
    api = scorer.score([wav for wav, rate in clips if rate == 16000], 16000)
    api += [scorer.score(wav, rate) for wav, rate in clips if rate != 16000]
    paths = []
    for i, (wav, rate) in enumerate(clips):
        paths.append(tmp_path / f"clip{i}.wav")
        sf.write(paths[-1], wav, rate, subtype="FLOAT")  # float samples: the file holds the array
    out = tmp_path / f"scores_{batch_size}_{pooling}.csv"
    args = ["--checkpoint", str(export), "--batch-size", str(batch_size), "--num-workers", "0"]
    args += ["--output", str(out), "--overwrite", "--device", "cpu"]
    args += [*(["--domain", domain] if domain else []), *(["--pooling", pooling] if pooling else [])]
    assert score.main([*args, *map(str, paths)]) == 0
    by_path = {row["path"]: float(row["score"]) for row in csv.DictReader(out.open())}
    return np.array(api), np.array([by_path[str(p)] for p in paths])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layout", "domain_id"),
    [("singmos_pro", 1), ("singmos_pro", 3), ("singmos_v1", None), ("sheet_wav2vec2_large", None)]
    + [("sheet_wav2vec2_base", None)],
)
@torch.no_grad()
def test_imported_predictors_score_every_clip_as_their_authors_forward(
    layout: str, domain_id: int | None, tmp_path: Path
) -> None:
    from sqa.data.audio import downmix_resample

    model, export, args = released_model(layout, tmp_path)
    assert importers.main(args) == 0
    assert yaml.safe_load((export / "config.yaml").read_text())["model"]["pooling"] == "s3prl_padded_mean"
    assert "s3prl_padded_mean" in (export / "README.md").read_text()
    clips = reference_clips()
    expected = []
    for wav, rate in clips:
        # The authors' models take 16 kHz input: the 44.1 kHz clip as sqa resamples it.
        wav16 = downmix_resample(wav[:, None], rate, 16000, "clip")
        extra = {} if domain_id is None else {"domain_id": domain_id}
        expected.append(float(model(torch.from_numpy(wav16)[None], **extra)))
    domain = None if domain_id is None else f"domain_id_{domain_id}"
    worst = {}
    for batch_size in (1, 8):
        api, cli = sqa_scores(export, clips, batch_size, tmp_path, domain)
        worst[batch_size] = float(max(np.abs(api - expected).max(), np.abs(cli - expected).max()))
    print(f"max |sqa - source| {layout} domain {domain_id}: batch 1 {worst[1]:.1e}, batch 8 {worst[8]:.1e}")
    assert max(worst.values()) <= 1e-4, worst
    # sqa's masked mean, still available, averages only the real frames: a different score.
    api, cli = sqa_scores(export, clips, 8, tmp_path, domain, pooling="masked_mean")
    assert np.abs(api - expected).max() > 1e-3
    np.testing.assert_allclose(api, cli, atol=1e-5, rtol=0)


# The conversions themselves, on small made-up tensors in each release's key layout: no s3prl.
def save_state(path: Path, state: dict) -> Path:
    torch.save(state, path)
    return path


def pro_state(num_ids: int = 6) -> dict[str, torch.Tensor]:
    """A singmos_pro layout: two backbone tensors, a (num_ids, 3) embedding, a 5 -> 4 -> 1 head."""
    ssl = importers.SINGMOS_SSL
    return {
        f"{ssl}w": torch.ones(2),
        f"{ssl}layer.b": torch.zeros(3),
        "domain_emb.weight": torch.arange(num_ids * 3, dtype=torch.float32).reshape(num_ids, 3),
        "decoder.net.0.weight": torch.full((4, 5), 0.5),
        "decoder.net.0.bias": torch.full((4,), 0.25),
        "decoder.net.3.weight": torch.full((1, 4), 2.0),
        "decoder.net.3.bias": torch.full((1,), -1.0),
    }


def test_singmos_pro_conversion_puts_the_hub_default_domain_first(tmp_path: Path) -> None:
    state = pro_state()
    converted = importers.convert_singmos_pro(save_state(tmp_path / "pro.pth", state))
    # The backbone's keys lose the release's prefix; nothing else is taken for the backbone.
    assert set(converted.ssl) == {"w", "layer.b"}
    # torch.hub's default ID 1 first, then 0, 2, ... 5: sqa's default domain is the hub's.
    assert converted.domains == [f"domain_id_{i}" for i in (1, 0, 2, 3, 4, 5)]
    rows = state["domain_emb.weight"][[1, 0, 2, 3, 4, 5]]
    torch.testing.assert_close(converted.other["domain.embedding.weight"], rows, rtol=0, atol=0)
    assert (converted.upstream, converted.head_dim, converted.domain_dim) == ("wav2vec2_large_ll60k", 4, 3)
    assert converted.range_clip is True
    assert set(converted.other) == {"head.0.weight", "head.0.bias", "head.3.weight", "head.3.bias"} | {
        "domain.embedding.weight"
    }
    for name, source in (("head.0.weight", "decoder.net.0.weight"), ("head.3.bias", "decoder.net.3.bias")):
        assert torch.equal(converted.other[name], state[source])
    # A release with another number of domain IDs: every one kept, the default still first.
    three = importers.convert_singmos_pro(save_state(tmp_path / "three.pth", pro_state(3)))
    assert three.domains == ["domain_id_1", "domain_id_0", "domain_id_2"]


def test_singmos_v1_head_computes_the_linear_layer_on_both_sides_of_zero(tmp_path: Path) -> None:
    weight, bias = torch.tensor([[1.0, -2.0, 0.5]]), torch.tensor([0.5])
    state = {f"{importers.SINGMOS_SSL}w": torch.ones(2), "linear.weight": weight, "linear.bias": bias}
    converted = importers.convert_singmos_v1(save_state(tmp_path / "v1.pt", state))
    assert (converted.upstream, converted.head_dim, converted.range_clip) == ("wav2vec2_base_960", 2, False)
    assert converted.domains == [] and converted.domain_dim is None and set(converted.ssl) == {"w"}
    # Frames whose w·x + b is 4, 0.5, -0.5 and -7.5 (by hand): the head gives exactly those.
    x = torch.tensor([[3.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.5, 0.0], [-2.0, 3.0, 0.0]])
    head = converted.other
    hidden = torch.relu(x @ head["head.0.weight"].T + head["head.0.bias"])
    out = hidden @ head["head.3.weight"].T + head["head.3.bias"]
    torch.testing.assert_close(out[:, 0], torch.tensor([4.0, 0.5, -0.5, -7.5]), rtol=0, atol=1e-6)


def test_released_weights_are_read_as_a_state_dict_or_a_trainer_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = {"a.weight": torch.ones(2), "b": torch.zeros(1)}
    plain = save_state(tmp_path / "plain.pth", state)
    trainer = save_state(tmp_path / "trainer.pkl", {"model": state, "steps": torch.tensor(5)})
    for path in (plain, trainer):
        assert importers.read_weights(path).keys() == state.keys()
    # From another working directory by a relative path, and through a symlink.
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link.pth").symlink_to(plain)
    monkeypatch.chdir(tmp_path / "sub")
    assert importers.read_weights(Path("link.pth")).keys() == state.keys()
    assert importers.read_weights(Path("../trainer.pkl")).keys() == state.keys()
    # A "model" entry that is a tensor is one of the state_dict's own tensors.
    own = save_state(tmp_path / "own.pth", {"model": torch.ones(1), "head": torch.ones(1)})
    assert set(importers.read_weights(own)) == {"model", "head"}
    bad = {
        "list.pth": [torch.ones(1)],
        "number.pth": {"a": torch.ones(1), "b": 3},
        "inner.pkl": {"model": {"a": 3}, "steps": 5},
    }
    for name, content in bad.items():
        with pytest.raises(importers.LayoutError, match=rf"{name} holds no state_dict of tensors"):
            importers.read_weights(save_state(tmp_path / name, content))
    (tmp_path / "junk.pth").write_bytes(b"not a zip file")
    with pytest.raises(importers.LayoutError, match=r"junk.pth is not a torch state_dict file"):
        importers.read_weights(tmp_path / "junk.pth")
    with pytest.raises(FileNotFoundError, match=r"gone.pth does not exist; expected the released"):
        importers.read_weights(tmp_path / "gone.pth")


class Planted:
    """A pickled object that, when unpickled, creates the file `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_released_weights_never_unpickle_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    state = {"model": {"a.weight": torch.ones(1)}, "hook": Planted(marker)}
    with pytest.raises(importers.LayoutError, match=r"planted.pkl is not a torch state_dict file"):
        importers.read_weights(save_state(tmp_path / "planted.pkl", state))
    assert not marker.exists()


def test_layout_errors_name_the_file_the_kind_and_the_keys(tmp_path: Path) -> None:
    ssl = {f"{importers.SINGMOS_SSL}w": torch.ones(1)}
    no_bias = save_state(tmp_path / "v1.pt", {**ssl, "linear.weight": torch.ones(1, 2)})
    with pytest.raises(importers.LayoutError) as err:
        importers.convert_singmos_v1(no_bias)
    assert str(err.value) == (
        f"{no_bias} does not have the singmos_v1 (use_lstm=False) layout: "
        "missing ['linear.bias'], unexpected []"
    )
    # A singmos_pro release with a pitch branch and no head bias: its kind named too.
    state = {k: v for k, v in pro_state().items() if k != "decoder.net.3.bias"}
    pitch = save_state(tmp_path / "pro.pth", {**state, "pitch_emb.weight": torch.ones(2)})
    with pytest.raises(importers.LayoutError) as err:
        importers.convert_singmos_pro(pitch)
    assert str(err.value) == (
        f"{pitch} does not have the singmos_pro layout: missing ['decoder.net.3.bias'], unexpected "
        "['pitch_emb.weight'] (branches such as pitch or judge embeddings are not imported)"
    )
    # Left-over keys are named (the first 8, sorted) with what the import leaves out.
    extra = {f"lstm.{i}": torch.ones(1) for i in range(9)}
    lstm = save_state(
        tmp_path / "lstm.pt", {**ssl, "linear.weight": torch.ones(1, 2), "linear.bias": torch.ones(1)}
    )
    torch.save({**torch.load(lstm), **extra}, lstm)
    with pytest.raises(importers.LayoutError) as err:
        importers.convert_singmos_v1(lstm)
    assert str(err.value) == (
        f"{lstm} does not have the singmos_v1 (use_lstm=False) layout: missing [], unexpected "
        f"{[f'lstm.{i}' for i in range(8)]} (branches such as pitch or judge embeddings are not imported)"
    )
    # No backbone under the kind's prefix: the file and the prefix are named.
    sheet = save_state(tmp_path / "sheet.pkl", {f"{importers.SHEET_SSL}w": torch.ones(1)})
    for convert in (importers.convert_singmos_pro, importers.convert_singmos_v1):
        with pytest.raises(importers.LayoutError) as err:
            convert(sheet)
        assert str(err.value) == (
            f"{sheet} has no wav2vec2 weights under 'ssl_model.ssl_model.upstream.model.'; "
            "is it the right kind?"
        )


SHEET_PARAMS = {
    "ssl_module": "s3prl",
    "s3prl_name": "wav2vec2_large_ll60k",
    "ssl_model_layer_idx": -1,
    "mean_net_output_type": "scalar",
}


def write_sheet_config(path: Path, params: dict, **top: object) -> Path:
    path.write_text(yaml.safe_dump({"model_type": "SSLMOS", **top, "model_params": params}), encoding="utf-8")
    return path


def test_sheet_config_defaults_apply_only_where_the_key_is_absent(tmp_path: Path) -> None:
    # No use_listener_modeling, sampling_rate nor mean_net_range_clipping: SSLMOS's defaults.
    config = write_sheet_config(tmp_path / "config.yml", SHEET_PARAMS)
    assert importers.read_sheet_config(config) == {**SHEET_PARAMS, "use_listener_modeling": False}
    weights = {f"{importers.SHEET_SSL}w": torch.ones(1)}
    weights |= {f"mean_net_dnn.net.{i}.weight": torch.ones(7, 3) for i in (0, 3)}
    weights |= {f"mean_net_dnn.net.{i}.bias": torch.ones(7) for i in (0, 3)}
    checkpoint = save_state(tmp_path / "checkpoint.pkl", weights)
    converted = importers.convert_sheet(checkpoint, config)
    assert (converted.upstream, converted.head_dim, converted.range_clip) == ("wav2vec2_large_ll60k", 7, True)
    assert converted.domains == [] and set(converted.ssl) == {"w"}
    # The file's value wins over the default, both ways.
    off = write_sheet_config(tmp_path / "off.yml", {**SHEET_PARAMS, "mean_net_range_clipping": False})
    assert importers.convert_sheet(checkpoint, off).range_clip is False
    listening = write_sheet_config(tmp_path / "listen.yml", {**SHEET_PARAMS, "use_listener_modeling": True})
    with pytest.raises(
        importers.LayoutError,
        match=r"listen.yml: model_params.use_listener_modeling is True; listener modeling is not imported$",
    ):
        importers.read_sheet_config(listening)
    plain = write_sheet_config(tmp_path / "plain.yml", {**SHEET_PARAMS, "use_listener_modeling": False})
    assert importers.read_sheet_config(plain)["use_listener_modeling"] is False
    assert importers.read_sheet_config(
        write_sheet_config(tmp_path / "16k.yml", SHEET_PARAMS, sampling_rate=16000)
    )
    with pytest.raises(
        importers.LayoutError, match=r"22k.yml: sampling_rate 22050; SHEET's SSL-MOS uses 16000"
    ):
        importers.read_sheet_config(
            write_sheet_config(tmp_path / "22k.yml", SHEET_PARAMS, sampling_rate=22050)
        )
    # A checkpoint of another layout: the file and what it lacks are named.
    pro = save_state(tmp_path / "pro.pth", pro_state())
    with pytest.raises(importers.LayoutError) as err:
        importers.convert_sheet(pro, config)
    assert (
        str(err.value)
        == f"{pro} has no wav2vec2 weights under 'ssl_model.upstream.model.'; is it the right kind?"
    )
    headless = save_state(tmp_path / "headless.pkl", {f"{importers.SHEET_SSL}w": torch.ones(1)})
    with pytest.raises(importers.LayoutError) as err:
        importers.convert_sheet(headless, config)
    assert str(err.value).startswith(
        f"{headless} does not have the SHEET SSLMOS layout: missing ['mean_net_dnn."
    )
    clip = write_sheet_config(tmp_path / "clip.yml", {**SHEET_PARAMS, "mean_net_range_clipping": "yes"})
    with pytest.raises(
        importers.LayoutError, match=r"clip.yml: model_params.mean_net_range_clipping must be true or false"
    ):
        importers.convert_sheet(checkpoint, clip)


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("ssl_module", "hf", "the SSL model must come from s3prl"),
        ("mean_net_output_type", "categorical", "only scalar outputs are imported"),
        ("ssl_model_layer_idx", 6, r"only the last SSL layer \(-1\) is imported"),
    ],
)
def test_sheet_config_refuses_what_sqa_cannot_import(
    tmp_path: Path, key: str, value: object, why: str
) -> None:
    config = write_sheet_config(tmp_path / "config.yml", {**SHEET_PARAMS, key: value})
    with pytest.raises(importers.LayoutError, match=rf"config.yml: model_params.{key} is {value!r}; {why}$"):
        importers.read_sheet_config(config)
    absent = {k: v for k, v in SHEET_PARAMS.items() if k != key}
    with pytest.raises(importers.LayoutError, match=rf"model_params.{key} is None; {why}$"):
        importers.read_sheet_config(write_sheet_config(tmp_path / "absent.yml", absent))


def test_sheet_config_files_that_are_not_sslmos_configs(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"none.yml does not exist; expected the SHEET model's config.yml"
    ):
        importers.read_sheet_config(tmp_path / "none.yml")
    (tmp_path / "bad.yml").write_text("model_type: [unclosed\n")
    with pytest.raises(importers.LayoutError, match=r"bad.yml is not a plain YAML file"):
        importers.read_sheet_config(tmp_path / "bad.yml")
    for name, text in (("list.yml", "- SSLMOS\n"), ("ldnet.yml", "model_type: LDNet\n")):
        (tmp_path / name).write_text(text)
        with pytest.raises(
            importers.LayoutError, match=rf"{name}: model_type must be SSLMOS, the only SHEET"
        ):
            importers.read_sheet_config(tmp_path / name)
    (tmp_path / "flat.yml").write_text("model_type: SSLMOS\nmodel_params: s3prl\n")
    with pytest.raises(importers.LayoutError, match=r"flat.yml: no model_params mapping"):
        importers.read_sheet_config(tmp_path / "flat.yml")


def test_import_paths_expand_the_home_folder_and_kinds_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=rf"^{tmp_path / 'w.pth'} does not exist"):
        importers.import_predictor("singmos_v1", "~/w.pth", tmp_path / "out")
    weights = save_state(tmp_path / "w.pkl", {})
    with pytest.raises(FileNotFoundError, match=rf"^{tmp_path / 'config.yml'} does not exist"):
        importers.import_predictor("sheet", weights, tmp_path / "out", sheet_config="~/config.yml")
    with pytest.raises(importers.LayoutError, match=r"^sheet needs --sheet-config \(the config.yml released"):
        importers.import_predictor("sheet", weights, tmp_path / "out")
    with pytest.raises(importers.LayoutError, match=r"kind must be one of \('singmos_pro', .*got 'mosnet'"):
        importers.import_predictor("mosnet", weights, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_sqa_import_help_and_an_unknown_kind(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        importers.main(["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: sqa-import [-h] [--sheet-config SHEET_CONFIG]")
    assert (
        "Command line: convert a released MOS predictor, downloaded by the user, into an sqa export." in text
    )
    # The docstring's first line only: its examples and layout notes stay out of --help.
    assert "Layouts, read from the public code" not in text
    # Each argument says what it is; the defaults say that nothing is downloaded.
    for said in (
        "{singmos_pro,singmos_v1,sheet}",
        "weights the released weights file (a local file; nothing is downloaded)",
        "output export directory to write",
        "--sheet-config SHEET_CONFIG sheet: the config.yml released with the checkpoint",
        "--upstream-checkpoint UPSTREAM_CHECKPOINT s3prl-converted wav2vec2 file giving the architecture "
        "(default: s3prl's cache)",
        "--overwrite replace an existing export",
    ):
        assert said in text
    with pytest.raises(SystemExit) as exit_:
        importers.main(["mosnet", "w.pth", "out"])
    assert exit_.value.code == 2 and "invalid choice: 'mosnet'" in capsys.readouterr().err
