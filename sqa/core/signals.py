"""How sqa's commands end on SIGTERM and SIGINT: a status of 128 + the signal (143, 130) and one line.

A cluster scheduler ends a job at its time limit with SIGTERM. Python's default then dies on the
spot (no `finally` runs, DataLoader workers are left to the init process), and Lightning's own
handler only notes the signal: its trainer then ends as if finished, exit status 0, and SLURM's
`afterok` chain carries on. `stop_on_signals` makes both signals raise `Stopped` in the main thread
instead, so that every `finally` runs (the run folder's claim is released, workers are shut down)
and the command exits with the shell's status for that signal, saying where it was (`stage`).

A signal the command was started with ignored (a shell's background job ignores SIGINT) stays
ignored, and a handler someone else installed is kept.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)
# What the command is doing, for the line it ends with; set by `stage`.
_stage = ""


class Stopped(BaseException):
    """A SIGTERM or SIGINT raised in the main thread: a BaseException, which `except Exception` lets by."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def status(self) -> int:
        """The exit status a shell gives a process killed by this signal: 128 + its number."""
        return 128 + self.signum


def stage(what: str) -> None:
    """Note what the command is doing now (e.g. "fitting candidate 2 of 3, distillmos_ft")."""
    global _stage
    _stage = what


def _raise(signum: int, frame: FrameType | None) -> None:
    """The handler: raise `Stopped` where the main thread is."""
    raise Stopped(signum)


@contextmanager
def stop_on_signals(command: str, hint: str | Callable[[], str] = "") -> Iterator[None]:
    """Within it, SIGTERM and SIGINT raise `Stopped`; one that escapes exits 128 + signal with one line.

    The line names `command`, the signal, the last `stage` and `hint` (what to do next; a callable
    is asked when the signal comes, e.g. whether a checkpoint was written by then).
    """
    stage("")
    installed = {}
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            current = signal.getsignal(signum)
            # Only Python's defaults are replaced: an ignored signal stays ignored, another's handler stays.
            if current in (signal.SIG_DFL, signal.default_int_handler):
                installed[signum] = signal.signal(signum, _raise)
    try:
        yield
    except Stopped as stopped:
        # A second signal while the line is written does not cut it short; the status is this one's.
        for signum in installed:
            signal.signal(signum, signal.SIG_IGN)
        where = f" while {_stage}" if _stage else ""
        then = hint() if callable(hint) else hint
        print(f"{command}: stopped by {stopped}{where}{'; ' + then if then else ''}", file=sys.stderr)
        sys.exit(stopped.status)
    finally:
        for signum, previous in installed.items():
            signal.signal(signum, previous)
