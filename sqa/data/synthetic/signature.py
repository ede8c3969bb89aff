"""The record a generated synthetic corpus keeps of its settings (`info/synthetic.json`), and its check.

A folder is read as a synthetic corpus only where its record matches the settings asked for, so a
corpus of other settings or of an older format is never silently reused.
"""

from __future__ import annotations

import json
from pathlib import Path

from sqa.data.corpus import CorpusError

# Raised whenever the corpus's audio or labels change (docs/testing.md, the pinned draws).
FORMAT_VERSION = 5
# Rating noise (SD, 1-5 scale) of every system unless a corpus's `rater_spread` says otherwise.
RATER_SPREAD = (0.5, 0.5)


def signature(
    seed: int,
    clips_per_system: int,
    systems_per_batch: tuple[int, ...],
    rater_spread: tuple[float, float] = RATER_SPREAD,
    songs: bool = False,
) -> dict:
    """The settings a generated corpus records: its format, seed, size and the options it was given.

    The options are recorded only where they differ from their defaults, so a corpus generated
    before they existed still matches its settings.
    """
    record: dict = {
        "format": FORMAT_VERSION,
        "seed": seed,
        "clips_per_system": clips_per_system,
        "systems_per_batch": list(systems_per_batch),
    }
    if tuple(rater_spread) != RATER_SPREAD:
        record["rater_spread"] = list(rater_spread)
    if songs:
        record["songs"] = True
    return record


def signature_at(marker: Path, root: Path) -> object:
    """The settings a corpus generated at `root` recorded in `marker`; CorpusError if none or unreadable."""
    if not marker.is_file():
        raise CorpusError(
            f"{root}: not a corpus sqa generated (no {marker.relative_to(root)}); choose another root"
        )
    try:
        return json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CorpusError(f"{marker}: unreadable ({err}); choose another root") from err
