"""Lightning checkpoint files: written atomically (`AtomicCheckpointIO`), their step read back."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, BinaryIO

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from sqa.core import ownership
from sqa.core.atomic import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O that writes each checkpoint atomically (temporary file, rename)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        """Write `checkpoint` to `path`; a kill leaves the previous file or the complete new one.

        A write the system refuses (a full disk, a file size limit) raises its OSError, which
        torch's archive writer would turn into a RuntimeError naming no file.
        """

        def save(fh: BinaryIO) -> None:
            refused: list[OSError] = []

            def write(data: bytes) -> int:
                try:
                    return fh.write(data)
                except OSError as err:
                    refused.append(err)
                    raise

            try:
                torch.save(checkpoint, SimpleNamespace(write=write, flush=fh.flush))
            except (RuntimeError, OSError):
                # torch passes the refusal on as a RuntimeError, or as the OSError without the file.
                if refused:
                    err = refused[0]
                    raise OSError(err.errno, err.strerror, str(path)) from None
                raise

        atomic_write(path, save)
        # Recorded as sqa's the moment it exists (in a run directory that keeps a record), so that a
        # run killed before its next record update still resumes from it.
        folder = Path(path).parent
        ownership.record_where_recorded(folder.parent, [folder.name])


def checkpoint_step(path: str | Path) -> int:
    """The global step at which a Lightning checkpoint was saved (read without loading its tensors)."""
    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])
