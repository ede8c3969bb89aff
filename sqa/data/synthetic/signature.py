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


def signature(seed: int, clips_per_system: int, systems_per_batch: tuple[int, ...]) -> dict:
    """The settings a generated corpus records: its format, seed and size."""
    return {
        "format": FORMAT_VERSION,
        "seed": seed,
        "clips_per_system": clips_per_system,
        "systems_per_batch": list(systems_per_batch),
    }


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
