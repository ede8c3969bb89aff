"""The synthetic corpus as a MUSHRA-style listening test: 0-100 ratings, one CSV row per rating.

`load_synthetic_mushra` rates the clips of the MOS corpus (`sqa.data.synthetic.mos`) with a
hidden reference and an anchor per batch and replicate ratings, and reads them as a CSV manifest.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from sqa.core.atomic import atomic_write_text
from sqa.data.corpus import Corpus, CorpusError
from sqa.data.readers import read_csv_manifest
from sqa.data.synthetic.mos import load_synthetic
from sqa.data.synthetic.signature import signature, signature_at

MUSHRA_FORMAT_VERSION = 1
MUSHRA_RANGE = (0.0, 100.0)
MUSHRA_MANIFEST = "mushra.csv"
# Listeners per batch pool, listeners rating each clip, the share of its clips that a listener
# rates a second time (a replicate), and the spreads of listener bias and rating noise (points).
MUSHRA_LISTENERS = 10
MUSHRA_LISTENERS_PER_CLIP = 4
MUSHRA_REPLICATE_SHARE = 0.2
MUSHRA_BIAS_STD = 8.0
MUSHRA_NOISE_STD = 8.0
MUSHRA_STREAM = 4
MUSHRA_COLUMNS = (
    "wav_path",
    "score",
    "system_id",
    "sample_id",
    "listener_id",
    "domain_id",
    "split",
    "test_set",
    "role",
    "replicate",
)


def _mushra_rows(corpus: Corpus, kinds: dict[str, str], seed: int) -> list[dict[str, object]]:
    """Per-listener 0-100 rating rows of the clips of `corpus` (systems' degradation `kinds`).

    A clip's latent MUSHRA quality is its MOS mapped linearly from 1-5 onto 0-100. Each batch
    has a pool of listeners with biases of their own; four of them rate each clip, and a fifth
    of those ratings are repeated by the same listener (`replicate` 1). The clean system of
    each batch is the hidden reference (rated near 100), the system with the lowest mean MOS the
    anchor.
    """
    rng = np.random.default_rng([seed, MUSHRA_STREAM])
    rows: list[dict[str, object]] = []
    for batch in corpus.domains:
        clips = [c for c in corpus.clips if c.domain == batch]
        means: dict[str, list[float]] = {}
        for c in clips:
            means.setdefault(c.system_id, []).append(c.mos)
        anchor = min(means, key=lambda s: (np.mean(means[s]), s))
        listeners = [f"{batch}-l{j:02d}" for j in range(MUSHRA_LISTENERS)]
        bias = rng.normal(0, MUSHRA_BIAS_STD, MUSHRA_LISTENERS)
        for clip in clips:
            role = (
                "reference"
                if kinds[clip.system_id] == "clean"
                else ("anchor" if clip.system_id == anchor else "")
            )
            latent = 100.0 if role == "reference" else 25.0 * (clip.mos - 1.0)
            for j in rng.choice(MUSHRA_LISTENERS, MUSHRA_LISTENERS_PER_CLIP, replace=False):
                repeats = 2 if rng.random() < MUSHRA_REPLICATE_SHARE else 1
                for replicate in range(repeats):
                    # References: listeners find the hidden reference and rate it near 100.
                    noise = (
                        -abs(rng.normal(0, 3.0))
                        if role == "reference"
                        else bias[j] + rng.normal(0, MUSHRA_NOISE_STD)
                    )
                    score = int(np.clip(np.rint(latent + noise), *MUSHRA_RANGE))
                    rows.append(
                        {
                            "wav_path": clip.path.relative_to(clip.path.parents[2]).as_posix(),
                            "score": score,
                            "system_id": clip.system_id,
                            "sample_id": clip.sample_id,
                            "listener_id": listeners[j],
                            "domain_id": batch,
                            "split": clip.split,
                            "test_set": clip.test_set or "",
                            "role": role,
                            "replicate": replicate,
                        }
                    )
    return rows


def load_synthetic_mushra(
    root: str | Path,
    seed: int = 0,
    clips_per_system: int = 14,
    systems_per_batch: tuple[int, ...] = (12, 12, 10, 8, 8),
    replicates: str = "per_listener",
    allow_generate: bool = True,
) -> Corpus:
    """The synthetic corpus as a MUSHRA-style listening test: 0-100 ratings, one row per rating.

    The audio is the default synthetic corpus's, under `<root>/audio` (generated there first if
    missing); `<root>/mushra.csv` holds a row per listener rating with `listener_id`, `role`
    (`reference` for each batch's clean system, `anchor` for its worst one) and `replicate`
    (1 for a listener's second rating of a clip), and is read as a CSV manifest on the 0-100
    scale, replicates averaged as `replicates` says. `allow_generate=False` reads only what exists.
    """
    root = Path(root)
    audio = load_synthetic(
        root / "audio", seed, clips_per_system, systems_per_batch, allow_generate=allow_generate
    )
    manifest = root / MUSHRA_MANIFEST
    marker = root / "mushra.json"
    expected = {"format": MUSHRA_FORMAT_VERSION, **signature(seed, clips_per_system, systems_per_batch)}
    if not manifest.is_file():
        if not allow_generate:
            raise CorpusError(f"{manifest}: no MUSHRA-style manifest there (allow_generate is false)")
        sys_info = (root / "audio" / "info" / "sys_info.json").read_text(encoding="utf-8")
        kinds = {s: v["type"] for s, v in json.loads(sys_info).items()}
        text = io.StringIO()
        writer = csv.DictWriter(text, MUSHRA_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(_mushra_rows(audio, kinds, seed))
        atomic_write_text(manifest, text.getvalue())
        atomic_write_text(marker, json.dumps(expected))
    if signature_at(marker, root) != expected:
        raise CorpusError(
            f"{marker}: {root} holds another MUSHRA-style corpus than seed={seed}, clips_per_system="
            f"{clips_per_system}, systems_per_batch={list(systems_per_batch)}; choose another root"
        )
    return read_csv_manifest(manifest, score_range=MUSHRA_RANGE, replicates=replicates)
