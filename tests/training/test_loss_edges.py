"""Boundaries and defaults of the losses, masked means and f0 extraction (mutants that survived).

Values are exact in binary floating point (halves and quarters), so "at the margin" is exact.
"""

import numpy as np
import pytest
import torch

from sqa.core.masking import masked_mean
from sqa.data.pitch import F0Extractor
from sqa.training import losses
from tests.training.test_losses import pred


def test_errors_at_the_margin_count_in_margin_l1_and_its_frame_variant():
    # 1[|ŷ − y| ≥ m]: an error of exactly the margin counts.
    out = pred([3.25, 2.0])
    assert losses.margin_l1(out, torch.tensor([3.0, 2.0]), margin=0.25).item() == 0.125
    frames = pred([0.0], frames=[[2.5, 2.0]], lengths=[2])
    assert losses.frame_margin_l1(frames, torch.tensor([2.0]), tau=0.5).item() == 0.25


def test_clipped_mse_drops_errors_of_at_most_tau_and_squares_the_rest():
    out = pred([2.5, 4.0, 1.0])
    # Errors 0.5 (= tau, dropped), 2 (squared: 4) and 0; mean over three labels.
    assert losses.clipped_mse(out, torch.tensor([2.0, 2.0, 1.0]), tau=0.5).item() == pytest.approx(4 / 3)


def test_default_margins_are_the_papers():
    # margin_l1 0.1 and contrastive 0.1 (DESIGN §6); frame_margin_l1 and clipped_mse τ = 0.5.
    out = pred([3.0, 2.0])
    target = torch.tensor([2.0, 2.0])
    # Pair differences ±1 minus margin 0.1, over 4 pairs, halved.
    assert losses.contrastive(out, target).item() == pytest.approx(2 * 0.9 / 4 / 2)
    frames = pred([0.0], frames=[[2.75, 3.0]], lengths=[2])
    # Frame errors 0.75 and 1.0, both above τ = 0.5 (and below 1.5).
    assert losses.frame_margin_l1(frames, torch.tensor([2.0])).item() == pytest.approx(0.875)
    assert losses.clipped_mse(pred([3.0]), torch.tensor([2.0])).item() == 1.0
    assert losses.margin_l1(pred([2.5]), torch.tensor([2.0])).item() == 0.5


def test_a_single_labelled_entry_is_its_own_mean():
    out = pred([3.0, 1.0])
    mask = torch.tensor([True, False])
    assert losses.margin_l1(out, torch.tensor([2.0, 5.0]), mask=mask).item() == 1.0
    x = torch.tensor([[[4.0], [9.0]]])
    assert masked_mean(x, torch.tensor([1])).tolist() == [[4.0]]


def test_mismatched_target_shape_names_both_shapes():
    with pytest.raises(ValueError, match=r"targets of shape \(2, 3\) for predictions \(2, 1\)"):
        losses.margin_l1(pred([3.0, 2.0]), torch.zeros(2, 3))


def test_f0_is_float32_and_every_computation_is_counted(monkeypatch):
    import pyworld

    monkeypatch.setattr(
        pyworld, "dio", lambda x, fs, floor, ceil, frame_period: (np.full(3, 200.0), np.zeros(3))
    )
    monkeypatch.setattr(pyworld, "stonemask", lambda x, f0, t, fs: f0)
    extractor = F0Extractor()
    first = extractor(np.zeros(800), 16000)
    extractor(np.ones(800), 16000)
    assert first.dtype == np.float32 and extractor.computed == 2
