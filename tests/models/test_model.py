import argparse
import ast
import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from sqa.exports.format import ExportError, export_predictor, load_export
from sqa.models.backbone import LogMelBackbone, conv_frame_lengths, mel_filterbank
from sqa.models.predictor import MOSPredictor


def logmel_predictor(**kwargs) -> MOSPredictor:
    torch.manual_seed(0)
    return MOSPredictor(LogMelBackbone(**kwargs)).eval()


def padded_batch(clips: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([c.shape[0] for c in clips])
    wav = torch.zeros(len(clips), int(lengths.max()))
    for i, c in enumerate(clips):
        wav[i, : c.shape[0]] = c
    return wav, lengths


@pytest.mark.parametrize("transformer_layers", [0, 2])
def test_score_alone_equals_score_in_padded_batch(transformer_layers):
    model = logmel_predictor(transformer_layers=transformer_layers)
    torch.manual_seed(1)
    short = 0.1 * torch.randn(7000)
    others = [0.1 * torch.randn(n) for n in (16000, 48000)]
    with torch.no_grad():
        alone = model(short[None], torch.tensor([7000])).score
        wav, lengths = padded_batch([*others, short])
        batched = model(wav, lengths).score
    assert batched[2].item() == pytest.approx(alone[0].item(), abs=1e-4)


def test_frame_count_matches_wav2vec2_front_end():
    lengths = torch.tensor([400, 719, 720, 16000])
    assert conv_frame_lengths(lengths).tolist() == [1, 1, 2, 49]
    model = logmel_predictor()
    wav, _ = padded_batch([torch.randn(16000)])
    assert model(wav, torch.tensor([16000])).frame_scores.shape == (1, 49)


def test_scores_stay_in_mos_range_with_range_clip():
    model = logmel_predictor()
    with torch.no_grad():
        model.head[-1].bias.fill_(100.0)
        assert model(torch.randn(2, 8000), torch.tensor([8000, 8000])).score.max() <= 5.0


def test_export_round_trip_reproduces_outputs(tmp_path):
    model = logmel_predictor(n_mels=32, channels=16)
    export_predictor(model, tmp_path / "exp", sample_rate=16000, domains=["a"], metrics={"x": 1})
    loaded, config, f0_extractor = load_export(tmp_path / "exp")
    assert f0_extractor is None
    wav = torch.randn(2, 9000)
    lengths = torch.tensor([9000, 5000])
    with torch.no_grad():
        torch.testing.assert_close(loaded(wav, lengths).score, model(wav, lengths).score)
    assert config["sample_rate"] == 16000 and config["domains"] == ["a"]
    assert torch.load(tmp_path / "exp" / "model.pt", weights_only=True).keys() == model.state_dict().keys()


def test_the_scale_maps_linearly_onto_the_internal_mos_scale_and_back():
    torch.manual_seed(0)
    mushra = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), head_dim=8, score_range=[0, 100])
    # 0 -> 1, 50 -> 3, 100 -> 5 (slope 4/100), and back.
    labels = torch.tensor([0.0, 25.0, 50.0, 100.0])
    torch.testing.assert_close(mushra.to_internal(labels), torch.tensor([1.0, 2.0, 3.0, 5.0]))
    torch.testing.assert_close(mushra.to_scale(torch.tensor([1.0, 2.0, 3.0, 5.0])), labels)
    # The MOS scale is the identity: the same tensor, so MOS runs are what they were.
    mos = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), head_dim=8)
    assert mos.to_internal(labels) is labels and mos.to_scale(labels) is labels
    assert mos.score_range == (1.0, 5.0) and mushra.score_range == (0.0, 100.0)
    with pytest.raises(ValueError, match="score_range must be"):
        MOSPredictor(LogMelBackbone(n_mels=16, channels=8), score_range=[5, 1])


def test_export_records_the_scale_and_the_scorer_returns_scores_on_it(tmp_path):
    from sqa.scoring.scorer import Scorer

    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), head_dim=8, score_range=[0, 100]).eval()
    export_predictor(model, tmp_path / "exp", sample_rate=16000, domains=["a"])
    assert yaml.safe_load((tmp_path / "exp" / "config.yaml").read_text())["model"]["score_range"] == [0, 100]
    wav = 0.1 * torch.randn(9000)
    with torch.no_grad():
        internal = model(wav[None], torch.tensor([9000])).score.item()
    scored = Scorer(tmp_path / "exp").score(wav.numpy(), 16000)
    assert scored == pytest.approx((internal - 1.0) * 25.0, abs=1e-3)
    assert 0.0 <= scored <= 100.0


def test_compiled_predictor_exports_and_loads_like_an_eager_one(tmp_path):
    model = logmel_predictor(n_mels=32, channels=16)
    keys = list(model.state_dict())
    model.compile()
    assert list(model.state_dict()) == keys
    export_predictor(model, tmp_path / "exp", sample_rate=16000, domains=["a"])
    loaded, _, _ = load_export(tmp_path / "exp")
    assert list(loaded.state_dict()) == keys
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, model.state_dict()[name]), name


# Inductor compiles generated C++ on CPU (about a minute for this model on 2 cores).
@pytest.mark.slow
@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
    reason="torch.compile on CPU needs a C++ compiler (g++, c++ or clang++); none is on PATH",
)
def test_compiled_forward_equals_eager():
    model = logmel_predictor(n_mels=32, channels=16)
    wav = torch.randn(2, 9000)
    lengths = torch.tensor([9000, 5000])
    with torch.no_grad():
        eager = model(wav, lengths).score
        model.compile()
        torch.testing.assert_close(model(wav, lengths).score, eager, atol=1e-5, rtol=0)
    assert model._compiled_call_impl is not None


def test_export_refuses_to_overwrite_without_flag(tmp_path):
    model = logmel_predictor(n_mels=32, channels=16)
    export_predictor(model, tmp_path / "exp", 16000, ["a"])
    before = (tmp_path / "exp" / "model.pt").read_bytes()
    with pytest.raises(ExportError, match="already exists"):
        export_predictor(logmel_predictor(n_mels=32, channels=8), tmp_path / "exp", 16000, ["a"])
    assert (tmp_path / "exp" / "model.pt").read_bytes() == before
    export_predictor(model, tmp_path / "exp", 16000, ["b"], overwrite=True)
    assert load_export(tmp_path / "exp")[1]["domains"] == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_load_refuses_foreign_targets_and_pickled_objects(tmp_path):
    model = logmel_predictor(n_mels=32, channels=16)
    export_predictor(model, tmp_path / "exp", 16000, ["a"])
    config_path = tmp_path / "exp" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["model"]["backbone"]["_target_"] = "os.system"
    config_path.write_text(yaml.safe_dump(config))
    with pytest.raises(ExportError, match="refusing to build 'os.system'"):
        load_export(tmp_path / "exp")

    export_predictor(model, tmp_path / "exp2", 16000, ["a"])
    # An arbitrary object in the pickle: weights_only loading must refuse it.
    torch.save({"w": argparse.Namespace(cmd="rm -rf /")}, tmp_path / "exp2" / "model.pt")
    with pytest.raises(ExportError, match="model.pt: not a plain tensor state_dict"):
        load_export(tmp_path / "exp2")


DIMS = ["mos", "lyrics", "melody"]


def test_multi_dimension_shapes_and_batch_invariance_per_dimension():
    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone(), dimensions=DIMS).eval()
    short = 0.1 * torch.randn(7000)
    wav, lengths = padded_batch([0.1 * torch.randn(16000), 0.1 * torch.randn(32000), short])
    with torch.no_grad():
        out = model(wav, lengths)
        alone = model(short[None], torch.tensor([7000]))
    assert out.scores.shape == (3, 3) and out.dim_frame_scores.shape == (3, 99, 3)
    assert out.score.shape == (3,) and torch.equal(out.score, out.scores[:, 0])
    torch.testing.assert_close(out.scores[2], alone.scores[0], atol=1e-4, rtol=0)


def test_dimensions_must_start_with_the_overall_score():
    with pytest.raises(ValueError, match="start with 'mos'"):
        MOSPredictor(LogMelBackbone(n_mels=16, channels=8), dimensions=["lyrics", "mos"])


def test_no_judge_means_the_mean_judge():
    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), num_judges=4, judge_dim=8).eval()
    wav, lengths = torch.randn(2, 8000), torch.tensor([8000, 5000])
    with torch.no_grad():
        default = model(wav, lengths).score
        mean = model(wav, lengths, judge=torch.tensor([4, 4])).score
        first = model(wav, lengths, judge=torch.tensor([0, 0])).score
    assert torch.equal(default, mean) and not torch.allclose(default, first)


def test_export_records_dimensions_and_judges(tmp_path):
    torch.manual_seed(0)
    model = MOSPredictor(
        LogMelBackbone(n_mels=16, channels=8), dimensions=DIMS, num_judges=3, judge_dim=8
    ).eval()
    export_predictor(model, tmp_path / "exp", 16000, ["a"], dimension_metrics={"lyrics": {"x": 1}})
    loaded, config, _ = load_export(tmp_path / "exp")
    assert config["model"]["dimensions"] == DIMS and config["model"]["num_judges"] == 3
    assert (tmp_path / "exp" / "metrics_lyrics.json").is_file()
    wav, lengths = torch.randn(2, 9000), torch.tensor([9000, 5000])
    with torch.no_grad():
        torch.testing.assert_close(loaded(wav, lengths).scores, model(wav, lengths).scores)


# Exports written by sqa before the SSL sources became the `sqa.models.ssl` package (commit
# 4b4670a): config.yaml and model.pt as that code wrote them, and the scores it gave on `golden_batch`.
OLD_EXPORTS = Path(__file__).parents[1] / "assets" / "exports_before_ssl_package"
OLD_SCORES = {
    "torchaudio": [3.260983, 3.348874, 3.101514, 3.279855],
    "logmel": [1.98195, 1.964042],
}


def golden_batch() -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.arange(6000, dtype=torch.float32)
    wav = torch.stack([0.3 * torch.sin(t * 0.05), 0.2 * torch.sin(t * 0.011) * (t < 4000)])
    return wav, torch.tensor([6000, 4000])


@pytest.mark.parametrize("name", list(OLD_SCORES))
def test_exports_from_before_the_ssl_package_load_score_and_reexport_the_same(name, tmp_path):
    loaded, config, _ = load_export(OLD_EXPORTS / name)
    expected_target = {
        "torchaudio": "sqa.models.ssl.TorchaudioWav2Vec2",
        "logmel": "sqa.models.backbone.LogMelBackbone",
    }
    assert config["model"]["backbone"]["_target_"] == expected_target[name]
    domain = torch.tensor([0, 1]) if name == "torchaudio" else None
    with torch.no_grad():
        scores = loaded(*golden_batch(), domain=domain).scores.flatten()
    torch.testing.assert_close(scores, torch.tensor(OLD_SCORES[name]), atol=1e-5, rtol=0)
    # The same model exported again writes the same config.yaml, plus the rating scale, the
    # pooling and vocal_only that exports record since (an old export's are the MOS scale, the
    # masked mean and whole clips).
    export_predictor(loaded, tmp_path / "again", config["sample_rate"], config["domains"])
    old = yaml.safe_load((OLD_EXPORTS / name / "config.yaml").read_text())
    assert "pooling" not in old["model"] and "score_range" not in old["model"] and "vocal_only" not in old
    old["vocal_only"] = False
    old["model"]["score_range"] = [1.0, 5.0]
    old["model"]["pooling"] = "masked_mean"
    assert yaml.safe_load((tmp_path / "again" / "config.yaml").read_text()) == old


def test_export_config_comes_from_the_typed_configs():
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), head_dim=8, dimensions=("mos", "lyrics"))
    config = model.export_config()
    assert list(config)[:2] == ["_target_", "backbone"]
    assert config == {
        "_target_": "sqa.models.predictor.MOSPredictor",
        "backbone": {
            "_target_": "sqa.models.backbone.LogMelBackbone",
            **dataclasses.asdict(model.backbone.config),
        },
        **dataclasses.asdict(model.config),
    }
    assert dataclasses.asdict(model.config)["dimensions"] == ["mos", "lyrics"]
    # Config fields are constructor arguments: a config rebuilds the same architecture.
    rebuilt = MOSPredictor(
        LogMelBackbone(**dataclasses.asdict(model.backbone.config)), **dataclasses.asdict(model.config)
    )
    assert rebuilt.export_config() == config
    # The export is a copy: editing it leaves the model's config alone.
    config["dimensions"].append("melody")
    assert model.config.dimensions == ["mos", "lyrics"]


FORBIDDEN_IN_MODELS = (
    "lightning",
    "pytorch_lightning",
    "hydra",
    "sqa.training.datamodule",
    "sqa.training.run",
    "sqa.training.lit_module",
)


def test_models_import_no_lightning_hydra_or_data_module():
    root = Path(__file__).parents[2] / "sqa" / "models"
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert not name.startswith(FORBIDDEN_IN_MODELS), f"{path} imports {name}"


@torch.no_grad()
def test_s3prl_padded_mean_pools_ceil_n_over_320_frames_with_the_last_repeated(tmp_path):
    torch.manual_seed(0)
    model = MOSPredictor(
        LogMelBackbone(n_mels=16, channels=8), head_dim=8, pooling="s3prl_padded_mean"
    ).eval()
    # N mod 320 = 40: s3prl has two frames more than the model; 6400 + 200: one more.
    lengths = torch.tensor([6440, 6600, 3000])
    wav = 0.1 * torch.randn(3, 6600) * (torch.arange(6600) < lengths[:, None])
    out = model(wav, lengths)
    for row, n in enumerate(lengths.tolist()):
        frames = out.frame_scores[row, : int(out.frame_lengths[row])]
        count = -(-n // 320)
        assert count - len(frames) == (2 if n % 320 in range(1, 80) else 1)
        by_hand = (frames.sum() + (count - len(frames)) * frames[-1]) / count
        assert float(out.score[row]) == pytest.approx(float(by_hand), abs=1e-6)
        assert float(out.score[row]) != pytest.approx(float(frames.mean()), abs=1e-6)
        # Per clip: the same score alone.
        alone = model(wav[row : row + 1, :n], lengths[row : row + 1]).score
        assert float(alone) == pytest.approx(float(out.score[row]), abs=1e-6)
    # Recorded in the export and stated in its model card; an unknown pooling is refused.
    export_predictor(model, tmp_path / "export", 16000, [])
    assert yaml.safe_load((tmp_path / "export" / "config.yaml").read_text())["model"]["pooling"] == (
        "s3prl_padded_mean"
    )
    assert "pools its frame scores by `s3prl_padded_mean`" in (tmp_path / "export" / "README.md").read_text()
    assert load_export(tmp_path / "export")[0].pooling == "s3prl_padded_mean"
    with pytest.raises(ValueError, match="pooling must be one of"):
        MOSPredictor(LogMelBackbone(n_mels=16, channels=8), pooling="max")


@pytest.mark.parametrize(("sample_rate", "n_mels"), [(16000, 64), (16000, 80), (8000, 40), (44100, 32)])
def test_mel_filterbank_is_torchaudios_slaney_filterbank(sample_rate, n_mels):
    torchaudio = pytest.importorskip("torchaudio")
    ours = mel_filterbank(201, sample_rate / 2, n_mels, sample_rate)
    reference = torchaudio.functional.melscale_fbanks(
        201, 0.0, sample_rate / 2, n_mels, sample_rate, norm="slaney", mel_scale="slaney"
    )
    # Peaks are about 0.02: float32 rounding of the band edges differs below 1e-6.
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
