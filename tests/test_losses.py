import pytest
import torch

from sqa import losses
from sqa.models.predictor import Prediction


def pred(scores, frames=None, lengths=None):
    scores = torch.tensor(scores)
    if frames is None:
        frames = scores[:, None]
        lengths = torch.ones(len(scores), dtype=torch.long)
    return Prediction(scores, torch.as_tensor(frames), torch.as_tensor(lengths))


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
    out = Prediction(scores, scores[:, None], torch.ones(2, dtype=torch.long))
    losses.margin_l1(out, torch.tensor([2.0, 2.0])).backward()
    assert scores.grad.tolist() == pytest.approx([0.5, -0.5])
