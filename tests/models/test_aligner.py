"""The aligner family: per-domain affine aligners on a shared score, exported, learned on synthetic data."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import sqa
from sqa.core.masking import frame_mask, masked_mean, repeat_last_mean
from sqa.data.singing import recipe_pool
from sqa.exports.format import export_predictor, load_export
from sqa.models.aligner import AlignedPredictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.scoring.scorer import DomainWarning
from sqa.training.run import run
from tests.training.test_train import compose_train

# A zero-padded batch of three clips (1 s, 0.56 s, 0.3 s) of three domains.
LENGTHS = torch.tensor([16000, 9000, 4800])
WAV = 0.1 * torch.randn(3, 16000, generator=torch.Generator().manual_seed(1)) * frame_mask(LENGTHS, 16000)
DOMAIN = torch.tensor([2, 0, 1])


def tiny(cls: type[MOSPredictor] = AlignedPredictor, **kwargs) -> MOSPredictor:
    """A seeded log-mel predictor of `cls` with 3 domains, in eval mode."""
    torch.manual_seed(0)
    return cls(LogMelBackbone(n_mels=16, channels=8), head_dim=16, num_domains=3, **kwargs).eval()


def set_aligner(model: AlignedPredictor, gains: list[list[float]], offsets: list[list[float]]) -> None:
    """Give domains 1.. the gains (D − 1, K) and offsets (D − 1, K)."""
    with torch.no_grad():
        model.aligner.log_gain.copy_(torch.tensor(gains).log())
        model.aligner.offset.copy_(torch.tensor(offsets))


def test_at_init_every_domain_scores_as_the_plain_predictor():
    plain, aligned = tiny(MOSPredictor), tiny()
    with torch.no_grad():
        expected = plain(WAV, LENGTHS)
        for domain in (None, DOMAIN, torch.tensor([1, 1, 1])):
            got = aligned(WAV, LENGTHS, domain)
            assert torch.equal(got.scores, expected.scores)
            assert torch.equal(got.dim_frame_scores, expected.dim_frame_scores)


def test_each_domain_maps_the_shared_score_by_its_own_gain_and_offset():
    model = tiny(dimensions=["mos", "lyrics"])
    set_aligner(model, [[0.8, 1.2], [1.5, 0.5]], [[0.3, -0.2], [-0.4, 0.1]])
    gain = torch.tensor([[1.0, 1.0], [0.8, 1.2], [1.5, 0.5]])
    offset = torch.tensor([[0.0, 0.0], [0.3, -0.2], [-0.4, 0.1]])
    with torch.no_grad():
        shared = model(WAV, LENGTHS)
        got = model(WAV, LENGTHS, DOMAIN)
        # Domain 0 is the reference: its scores are the shared ones.
        torch.testing.assert_close(
            model(WAV, LENGTHS, torch.zeros(3, dtype=torch.long)).scores, shared.scores
        )
    expected = gain[DOMAIN] * (shared.scores - 3.0) + 3.0 + offset[DOMAIN]
    torch.testing.assert_close(got.scores, expected)
    torch.testing.assert_close(got.score, expected[:, 0])
    mask = frame_mask(shared.frame_lengths, shared.dim_frame_scores.shape[1])[..., None]
    frames = gain[DOMAIN][:, None] * (shared.dim_frame_scores - 3.0) + 3.0 + offset[DOMAIN][:, None]
    torch.testing.assert_close(got.dim_frame_scores, frames * mask)
    torch.testing.assert_close(got.frame_scores, got.dim_frame_scores[..., 0])


@pytest.mark.parametrize("pooling", ["masked_mean", "s3prl_padded_mean"])
def test_the_pooled_aligned_frames_are_the_aligned_clip_score(pooling):
    model = tiny(pooling=pooling)
    set_aligner(model, [[0.7], [1.3]], [[0.5], [-0.6]])
    with torch.no_grad():
        out = model(WAV, LENGTHS, DOMAIN)
    if pooling == "masked_mean":
        pooled = masked_mean(out.dim_frame_scores, out.frame_lengths)
    else:
        counts = torch.div(
            LENGTHS + model.backbone.hop_length - 1, model.backbone.hop_length, rounding_mode="floor"
        )
        pooled = repeat_last_mean(out.dim_frame_scores, out.frame_lengths, counts)
    torch.testing.assert_close(pooled, out.scores)


def test_a_clip_alone_scores_as_in_a_padded_batch_of_other_domains():
    model = tiny()
    set_aligner(model, [[0.7], [1.3]], [[0.5], [-0.6]])
    with torch.no_grad():
        batch = model(WAV, LENGTHS, DOMAIN)
        for row, n in enumerate(LENGTHS.tolist()):
            alone = model(WAV[row : row + 1, :n], LENGTHS[row : row + 1], DOMAIN[row : row + 1])
            torch.testing.assert_close(alone.scores[0], batch.scores[row], rtol=1e-5, atol=1e-5)


def test_the_aligner_comes_with_the_domain_embedding_when_asked():
    model = tiny(domain_dim=4)
    assert model.domain is not None and model.aligner.num_domains == 3
    with pytest.raises(ValueError, match="pass domain"):
        model(WAV, LENGTHS)


def test_an_export_round_trips_its_aligners_and_scores_as_the_shared_score_by_default(tmp_path):
    model = tiny()
    set_aligner(model, [[0.7], [1.3]], [[0.5], [-0.6]])
    export_predictor(model, tmp_path / "exp", 16000, ["p1", "p2", "p3"])
    loaded = load_export(tmp_path / "exp")[0]
    assert isinstance(loaded, AlignedPredictor) and loaded.config == model.config
    torch.testing.assert_close(loaded.aligner.gains(), torch.tensor([[1.0], [0.7], [1.3]]))
    with torch.no_grad():
        torch.testing.assert_close(loaded(WAV, LENGTHS, DOMAIN).scores, model(WAV, LENGTHS, DOMAIN).scores)
        shared = [
            float(model(WAV[r : r + 1, :n], LENGTHS[r : r + 1]).score) for r, n in enumerate(LENGTHS.tolist())
        ]
    # Without a domain the scorer scores as domain 0, the reference, whose scores are the shared
    # ones, and says so; a named domain scores through its own aligner, the mean through all.
    clips = [WAV[r, :n].numpy() for r, n in enumerate(LENGTHS.tolist())]
    with pytest.warns(DomainWarning, match="scoring as domain 'p1' \\(index 0\\), the first of the 3"):
        default = sqa.load(tmp_path / "exp")
    np.testing.assert_allclose(default.score(clips, 16000), shared, rtol=1e-5, atol=1e-5)
    p3 = sqa.load(tmp_path / "exp", domain="p3").score(clips, 16000)
    np.testing.assert_allclose(p3, [1.3 * (s - 3) + 3 - 0.6 for s in shared], rtol=1e-5, atol=1e-5)
    mean = sqa.load(tmp_path / "exp", domain="mean").score(clips, 16000)
    by_domain = [[g * (s - 3) + 3 + b for s in shared] for g, b in ((1.0, 0.0), (0.7, 0.5), (1.3, -0.6))]
    np.testing.assert_allclose(mean, np.mean(by_domain, axis=0), rtol=1e-5, atol=1e-5)


def true_batch_scales(seed: int = 0, systems_per_batch: tuple[int, ...] = (12, 12, 10, 8, 8)) -> np.ndarray:
    """(bias, gain) (5, 2) of each synthetic batch, replaying `sqa.data.synthetic.mos`'s master draws."""
    master = np.random.default_rng(seed)
    pool = recipe_pool(master)
    scales = []
    for n_sys in systems_per_batch:
        scales.append((master.normal(0, 0.35), master.uniform(0.8, 1.15)))
        master.choice(np.arange(1, len(pool)), n_sys - 1, replace=False)
    return np.array(scales)


def test_the_replayed_batch_scales_are_the_generators():
    # Pinned for seed 0: a change in the generator's draws shows here before in the learning test.
    np.testing.assert_allclose(
        true_batch_scales(),
        [[-0.443, 1.086], [-0.233, 1.027], [0.075, 0.909], [-0.110, 0.880], [0.230, 0.918]],
        atol=5e-4,
    )


def map_error(
    gains: np.ndarray, offsets: np.ndarray, true_gains: np.ndarray, true_offsets: np.ndarray
) -> float:
    """Mean over domains 1.. of the RMS gap of a·(s − 3) + 3 + b (D,) to the true maps, s in [1.5, 4.5]."""
    s = np.linspace(1.5, 4.5, 61)[:, None]
    gap = (gains - true_gains)[1:] * (s - 3) + (offsets - true_offsets)[1:]
    return float(np.sqrt((gap**2).mean(axis=0)).mean())


@pytest.mark.slow
def test_a_tiny_aligned_model_learns_each_batchs_bias_and_beats_the_constant(synthetic_root, tmp_path):
    """1500 Adam steps on the default synthetic corpus with the intonation branch: offsets follow biases."""
    overrides = [
        "data=synthetic",
        f"data.corpus.root={synthetic_root}",
        "model=aligned",
        # Each batch's offset absorbs the shared model's mean error over that batch's systems: the
        # pitch-error systems, which a log-mel front end this small cannot hear, left the offsets
        # at Pearson 0.37-0.64 without the branch (docs/guide.md#aligner).
        "model.pitch=intonation",
        "optim=adam",
        "optim.lr=3e-3",
        "head_init=train_mean",
        "trainer.max_steps=1500",
        "trainer.val_check_interval=100",
        "trainer.enable_progress_bar=false",
        "early_stopping_patience=null",
        "selection.metric=rmse",
        "selection.level=utt",
        "bootstrap=20",
    ]
    run(compose_train(overrides), tmp_path / "run")
    check = json.loads((tmp_path / "run" / "run_info.json").read_text(encoding="utf-8"))["learning_check"]
    assert check["test"]["rmse"] < check["test"]["constant_rmse"]
    model = load_export(tmp_path / "run" / "export")[0]
    offsets = model.aligner.offsets()[:, 0].detach().numpy()
    gains = model.aligner.gains()[:, 0].detach().numpy()
    bias, gain = true_batch_scales().T
    # Domain d's ratings on domain 0's scale s: 3 + (g_d / g_0)·(s − 3) + bias_d − (g_d / g_0)·bias_0.
    true_gains = gain / gain[0]
    true_offsets = bias - true_gains * bias[0]
    print("offsets", offsets.round(3), "true", true_offsets.round(3))
    print("gains", gains.round(3), "true", true_gains.round(3))
    # Seeds 0/1/2: offsets Pearson 0.92/0.90/0.89; maps 0.14/0.16/0.14 from the truth against the
    # identity's 0.39 (0.26-0.28 without the branch). The gains alone are not pinned (Pearson
    # 0.34/0.23/0.48): the four batches' true gains lie within 0.81-0.95, and 8-12 systems a batch
    # trade slope against offset.
    assert np.corrcoef(offsets, true_offsets)[0, 1] > 0.8
    identity = map_error(np.ones(5), np.zeros(5), true_gains, true_offsets)
    assert map_error(gains, offsets, true_gains, true_offsets) < 0.5 * identity
