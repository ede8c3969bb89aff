"""Masked standardisation: valid steps only, one scalar per row, as layer_norm of the unpadded clip."""

import torch
import torch.nn.functional as F

from sqa.core.masking import masked_standardize


def test_hand_computed_row_with_padding():
    x = torch.tensor([[1.0, 3.0, 100.0]])
    out = masked_standardize(x, torch.tensor([2]), eps=0.0)
    assert out.tolist() == [[-1.0, 1.0, 0.0]]


def test_each_row_is_layer_norm_of_its_unpadded_part_alone_or_batched():
    torch.manual_seed(0)
    x = torch.randn(3, 40, 5) * 4 + 2
    lengths = torch.tensor([40, 17, 1])
    batched = masked_standardize(x, lengths)
    for b, n in enumerate(lengths.tolist()):
        valid = x[b, :n]
        expected = F.layer_norm(valid, valid.shape)
        torch.testing.assert_close(batched[b, :n], expected)
        torch.testing.assert_close(masked_standardize(valid[None], torch.tensor([n]))[0], expected)
        assert torch.all(batched[b, n:] == 0)


def test_waveforms_match_layer_norm_of_each_clip():
    torch.manual_seed(1)
    wav = torch.randn(2, 1000)
    lengths = torch.tensor([1000, 600])
    out = masked_standardize(wav, lengths)
    torch.testing.assert_close(out[1, :600], F.layer_norm(wav[1, :600], (600,)))


def test_repeat_last_mean_counts_the_last_valid_step_as_s3prl_pads_it():
    from sqa.core.masking import repeat_last_mean

    x = torch.tensor([[1.0, 2.0, 4.0, 99.0, 99.0], [3.0, 5.0, 99.0, 99.0, 99.0]])
    # Row 0: 3 valid steps padded to 5 -> 1, 2, 4, 4, 4; row 1: 2 valid steps cut to 1 -> 3.
    out = repeat_last_mean(x, torch.tensor([3, 2]), torch.tensor([5, 1]))
    assert out.tolist() == [15.0 / 5, 3.0]
    # Each row alone gives the same value: padding of other rows never counts.
    alone = repeat_last_mean(x[:1, :3], torch.tensor([3]), torch.tensor([5]))
    assert alone.tolist() == [3.0]
    # Trailing dims (B, T, K) are averaged per dimension.
    stacked = torch.stack([x, 2 * x], dim=-1)
    assert repeat_last_mean(stacked, torch.tensor([3, 2]), torch.tensor([5, 1])).tolist() == [
        [3.0, 6.0],
        [3.0, 6.0],
    ]
