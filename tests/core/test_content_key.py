"""content_key: equal values of one dtype share a key, wherever they sit; anything else does not."""

from __future__ import annotations

import torch

from sqa.core.content_key import content_key


def test_a_clip_cut_from_a_padded_batch_has_its_own_key() -> None:
    clip = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    batch = torch.zeros(3, 1500)
    batch[1, :1000] = clip
    assert content_key(batch[1, :1000]) == content_key(clip)
    # A column of a batch is a strided view: its values, not its layout, are keyed.
    assert content_key(batch.T.contiguous().T[1, :1000]) == content_key(clip)
    assert len(content_key(clip)) == 16


def test_one_changed_sample_or_length_changes_the_key() -> None:
    clip = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    changed = clip.clone()
    changed[500] = torch.nextafter(changed[500], torch.tensor(1e9))
    assert content_key(changed) != content_key(clip)
    assert content_key(clip[:999]) != content_key(clip)
    # The padding a batch adds is samples too: a clip with trailing zeros is another clip.
    assert content_key(torch.cat([clip, torch.zeros(1)])) != content_key(clip)


def test_the_same_values_in_another_dtype_have_another_key() -> None:
    values = torch.arange(8, dtype=torch.int32)
    assert content_key(values) == content_key(values.clone())
    as_float = values.view(torch.float32)
    # The same bytes under another dtype are other values.
    assert content_key(as_float) != content_key(values)
