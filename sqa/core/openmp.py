"""How long OpenMP's threads spin at a barrier, set by sqa's training commands before torch loads.

torch's wheels use GNU OpenMP, whose waiting threads spin 300,000 times before they sleep. On a
machine shared with other jobs (a lab server, a laptop) a spinning thread holds a core another
thread of the same step needs: a Distill-MOS fine-tuning step took 4-5 times as long beside two
busy processes. A spin of 10,000 kept the idle machine's speed and made the busy one 1.75 times
faster; sleeping at once (`OMP_WAIT_POLICY=PASSIVE`) cost 16-30 % on the idle machine
(`benchmarks/contention.py`, benchmarks/README.md). A user's own `GOMP_SPINCOUNT` wins.
"""

from __future__ import annotations

import os

SPIN_COUNT = "10000"


def short_spin() -> None:
    """Set `GOMP_SPINCOUNT` unless the user has; only effective before torch is first imported."""
    os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
