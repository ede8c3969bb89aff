"""Lightning checkpoints as sqa writes them: atomically, a refused write named, their step read back."""

from __future__ import annotations

import errno
import pickle

import pytest
import torch

from sqa.core import ownership
from sqa.training import checkpoint_io
from sqa.training.checkpoint_io import AtomicCheckpointIO, checkpoint_step


@pytest.mark.parametrize("step", [0, 7, 1234])
def test_the_step_a_checkpoint_was_saved_at_is_read_back(step, tmp_path):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"global_step": step, "state_dict": {"w": torch.ones(3)}}, path)
    assert checkpoint_step(path) == step
    assert torch.load(path, weights_only=True)["state_dict"]["w"].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_write_the_system_refuses_is_its_oserror_naming_the_file_and_the_old_one_is_kept(
    code, tmp_path, monkeypatch
):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"global_step": 1}, path)
    real = checkpoint_io.atomic_write

    def refusing(target, write):
        class Full:
            def write(self, data: bytes) -> int:
                raise OSError(code, "refused by the system")

            def flush(self) -> None:
                pass

        real(target, lambda fh: write(Full()))

    monkeypatch.setattr(checkpoint_io, "atomic_write", refusing)
    with pytest.raises(OSError) as raised:
        AtomicCheckpointIO().save_checkpoint({"global_step": 2, "big": torch.zeros(1000)}, path)
    assert (raised.value.errno, raised.value.strerror, raised.value.filename) == (
        code,
        "refused by the system",
        str(path),
    )
    assert checkpoint_step(path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_a_checkpoint_in_a_recorded_run_folder_is_recorded_at_once_and_elsewhere_records_nothing(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    ownership.record_all(run)
    AtomicCheckpointIO().save_checkpoint({"global_step": 3}, run / "checkpoints" / "last.ckpt")
    assert "checkpoints" in ownership.owned(run)
    other = tmp_path / "other"
    AtomicCheckpointIO().save_checkpoint({"global_step": 3}, other / "checkpoints" / "last.ckpt")
    assert not ownership.has_record(other)


class _Runs:
    """Pickles as a call of `len`: code a checkpoint file must never get to run when it is read."""

    def __reduce__(self):
        return (len, ("seven!!",))


def test_a_checkpoint_that_pickles_a_call_is_refused_not_run(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({"global_step": _Runs()}, path)
    with pytest.raises(pickle.UnpicklingError):
        checkpoint_step(path)
