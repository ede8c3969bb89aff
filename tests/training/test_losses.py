from pathlib import Path

import pytest
import torch

from sqa.models.predictor import Prediction
from sqa.training import losses


def pred(scores, frames=None, lengths=None):
    scores = torch.tensor(scores)
    if frames is None:
        frames = scores[:, None]
        lengths = torch.ones(len(scores), dtype=torch.long)
    frames = torch.as_tensor(frames)
    return Prediction(scores, frames, torch.as_tensor(lengths), scores[:, None], frames[:, :, None])


def test_margin_l1_ignores_errors_below_margin():
    out = pred([3.05, 2.0, 4.5])
    target = torch.tensor([3.0, 2.5, 4.0])
    # Errors 0.05 (below the margin, dropped), 0.5, 0.5, averaged over all three clips.
    assert losses.margin_l1(out, target, margin=0.1).item() == pytest.approx(1.0 / 3)


def test_frame_margin_l1_averages_valid_frames_only():
    out = pred([0.0, 0.0], frames=[[3.0, 1.0, 9.0], [2.0, 2.2, 5.0]], lengths=[2, 3])
    target = torch.tensor([2.0, 2.0])
    # Valid errors: 1, 1 | 0, 0.2 (< tau, dropped), 3; padded 7 ignored. Sum 5 over 5 frames.
    assert losses.frame_margin_l1(out, target, tau=0.5).item() == pytest.approx(1.0)


def test_clipped_mse_and_contrastive_by_hand():
    out = pred([1.0, 3.0])
    target = torch.tensor([1.2, 2.0])
    assert losses.clipped_mse(out, target, tau=0.5).item() == pytest.approx(1.0 / 2)
    # Pair differences (1-3)-(1.2-2) = -1.2 and +1.2, diagonal 0:
    # max(0, 1.2-0.1) twice, over 4 pairs, halved.
    assert losses.contrastive(out, target, margin=0.1).item() == pytest.approx(2 * 1.1 / 4 / 2)


def test_margin_l1_gradient_flows():
    scores = torch.tensor([3.0, 1.0], requires_grad=True)
    out = Prediction(
        scores, scores[:, None], torch.ones(2, dtype=torch.long), scores[:, None], scores[:, None, None]
    )
    losses.margin_l1(out, torch.tensor([2.0, 2.0])).backward()
    assert scores.grad.tolist() == pytest.approx([0.5, -0.5])


def multi(scores):
    scores = torch.tensor(scores, requires_grad=True)
    frames = scores[:, None, :]
    return scores, Prediction(
        scores[:, 0], frames[:, :, 0], torch.ones(len(scores), dtype=torch.long), scores, frames
    )


def test_masked_multi_head_margin_l1_by_hand():
    scores, out = multi([[3.0, 2.0, 4.0], [1.0, 5.0, 2.0]])
    target = torch.tensor([[2.5, float("nan"), 3.0], [1.05, 4.0, float("nan")]])
    mask = torch.tensor([[True, False, True], [True, True, False]])
    # Labelled errors 0.5, 1.0 | 0.05 (below the margin), 1.0: sum 2.5 over 4 labels.
    loss = losses.margin_l1(out, target, mask=mask, margin=0.1)
    assert loss.item() == pytest.approx(2.5 / 4)
    loss.backward()
    # A missing label gets no gradient; labelled ones d|e|/4.
    assert scores.grad.flatten().tolist() == pytest.approx([0.25, 0.0, 0.25, 0.0, 0.25, 0.0])


@pytest.mark.parametrize("name", ["margin_l1", "frame_margin_l1", "clipped_mse", "contrastive"])
def test_missing_labels_contribute_nothing(name):
    fn = getattr(losses, name)
    _, out = multi([[3.0, 2.0], [1.0, 5.0], [2.0, 2.5]])
    mask = torch.tensor([[True, True], [True, False], [True, True]])
    target = torch.tensor([[2.0, 3.0], [4.0, 0.0], [1.0, 1.0]])
    other = target.clone()
    other[1, 1] = float("nan")
    assert fn(out, other, mask=mask).item() == pytest.approx(fn(out, target, mask=mask).item())
    assert torch.isfinite(fn(out, other, mask=mask))


@pytest.mark.parametrize("name", ["margin_l1", "frame_margin_l1", "clipped_mse", "contrastive"])
def test_single_dimension_equals_the_overall_loss(name):
    fn = getattr(losses, name)
    out = pred(
        [3.05, 2.0, 4.5, 1.0], frames=[[3.0, 3.1], [2.0, 1.0], [4.5, 4.5], [1.0, 0.0]], lengths=[2, 2, 2, 1]
    )
    target = torch.tensor([3.0, 2.5, 4.0, 2.0])
    full = torch.ones(4, 1, dtype=torch.bool)
    assert fn(out, target[:, None], mask=full).item() == fn(out, target).item()


def test_contrastive_uses_labelled_pairs_only():
    _, out = multi([[1.0], [3.0], [0.0]])
    target = torch.tensor([[1.2], [2.0], [9.0]])
    mask = torch.tensor([[True], [True], [False]])
    # The pairs of the two labelled clips, as in test_clipped_mse_and_contrastive_by_hand.
    assert losses.contrastive(out, target, mask=mask, margin=0.1).item() == pytest.approx(2 * 1.1 / 4 / 2)


def test_gradient_of_a_head_without_labels_is_zero():
    from sqa.models.backbone import LogMelBackbone
    from sqa.models.predictor import MOSPredictor

    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), dimensions=["mos", "lyrics", "melody"])
    out = model(torch.randn(3, 8000), torch.tensor([8000, 6000, 4000]))
    target = torch.tensor([[3.0, 2.0, 0.0], [4.0, float("nan"), 0.0], [1.0, 5.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False], [True, True, False]])
    losses.margin_l1(out, target, mask=mask).backward()
    last = model.head[-1]
    assert torch.all(last.weight.grad[2] == 0) and last.bias.grad[2] == 0
    assert last.weight.grad[:2].abs().sum() > 0


def test_utmosv2_config_is_its_weighted_pairwise_and_mse_terms_by_hand():
    """conf/loss/utmosv2.yaml against UTMOSv2's formula, 0.7·pairwise(margin 0.2, L1) + 0.2·MSE."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    loss = instantiate(OmegaConf.load(Path(__file__).parents[2] / "conf" / "loss" / "utmosv2.yaml"))
    out = pred([3.0, 2.15, 4.5])
    target = torch.tensor([3.2, 2.5, 4.0])
    # Errors e = ŷ − y = -0.2, -0.35, 0.5; a pair's |(ŷi−ŷj)−(yi−yj)| = |ei − ej|: 0.15 (inside the
    # margin 0.2: 0), 0.7 (0.5) and 0.85 (0.65), each pair twice, over all 3×3 ordered pairs
    # (the diagonal counts, as in UTMOSv2's mean), halved.
    pairwise = 2 * (0.0 + 0.5 + 0.65) / 9 / 2
    mse = (0.2**2 + 0.35**2 + 0.5**2) / 3
    assert losses.contrastive(out, target, margin=0.2).item() == pytest.approx(pairwise)
    assert loss(out, target).item() == pytest.approx(0.7 * pairwise + 0.2 * mse)


def test_weighted_sum_needs_one_weight_per_loss():
    with pytest.raises(ValueError, match="one weight per loss"):
        losses.weighted_sum(pred([3.0]), torch.tensor([3.0]), losses=[losses.margin_l1], weights=[])


def test_weighted_sum_passes_the_label_mask_to_every_term():
    out, target = pred([3.0, 5.0]), torch.tensor([2.0, 1.0])
    mask = torch.tensor([True, False])
    terms = [losses.margin_l1, losses.clipped_mse]
    # Only the first clip counts: error 1 (above both losses' margins) gives 1 in each term.
    masked = losses.weighted_sum(out, target, mask, losses=terms, weights=[0.7, 0.2])
    assert masked.item() == pytest.approx(0.7 * 1.0 + 0.2 * 1.0)
    # Unmasked, the second clip's error 4 counts too: (1 + 4) / 2 and (1 + 16) / 2.
    whole = losses.weighted_sum(out, target, losses=terms, weights=[0.7, 0.2])
    assert whole.item() == pytest.approx(0.7 * 2.5 + 0.2 * 8.5)
