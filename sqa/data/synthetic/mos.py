"""The synthetic singing corpus rated by MOS, written in the SingMOS-Pro layout.

Sung phrases (harmonic source with vibrato, vowel formants, note glides, breath gaps) from random
melodies are passed through "systems": degradation recipes whose severity sets a latent quality
(both in `sqa.data.singing`).
Each annotation batch p1..p5 has its own rater bias and scale; every clip gets five integer
ratings whose mean is its MOS (its lyrics, melody and judge labels: `sqa.data.synthetic.labels`).
Everything is deterministic from the seed.

Clips are sung phrases of about 1-3.5 s, except one long clip (12-20 s, longer than the default
training crop of 10 s) among the training clips of one system per batch and among the test clips
of another system per test batch; systems have unequal clip counts (0.6-1.4 times
`clips_per_system`). So training crops (and the f0 slice that follows them), whole-clip scoring
of long clips and the clip- versus system-weighted averages over test sets are all exercised.
The clip counts and long-clip lengths come from a random stream of their own.

Two options make it a richer listening test, each leaving the default corpus as it was:
`rater_spread` (low, high) gives each degradation recipe its own rating noise (SD, drawn
uniformly in that range and recorded in `sys_info.json` as `rater_spread`), so systems differ
in how much their listeners disagree; `songs=True` has the n-th clip of every system of a batch
sing the same melody (its `song` in `score.json`), so the test sets hold same-song renditions by
different systems. Long clips sing melodies of their own and have no song.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import soundfile as sf

from sqa.core.atomic import atomic_dir
from sqa.data.audio import os_path, resample
from sqa.data.corpus import Corpus, CorpusError
from sqa.data.readers import read_singmos_pro
from sqa.data.singing import SYNTH_RATE, degrade, melody, recipe_pool, sing
from sqa.data.synthetic.labels import (
    JUDGE_LENIENCY_STD,
    JUDGE_STREAM,
    JUDGES_PER_BATCH,
    LABEL_STREAM,
    assign_judges,
    dimension_quality,
)
from sqa.data.synthetic.signature import FORMAT_VERSION, RATER_SPREAD, signature, signature_at

BATCHES = ("singmospro-p1", "singmospro-p2", "singmospro-p3", "singmospro-p4", "singmospro-p5")
TEST_BATCHES = BATCHES[:3]
# Batches whose clips have lyrics and melody MOS (SingMOS-Pro has them for part of its batches).
DIMENSION_BATCHES = BATCHES[0], BATCHES[1], BATCHES[3]
# Key of the random stream of the layout (clip counts per system, long-clip lengths).
LAYOUT_STREAM = 3
# A system's clip count is `clips_per_system` times a factor drawn from this range.
CLIP_COUNT_SPREAD = (0.6, 1.4)
# Length range (seconds) of the long clips.
LONG_SECONDS = (12.0, 20.0)
# Keys of the random streams of the recipes' rating noise and of the shared songs' melodies.
SPREAD_STREAM, SONG_STREAM = 5, 6


def generate(
    root: str | Path,
    seed: int = 0,
    clips_per_system: int = 14,
    systems_per_batch: tuple[int, ...] = (12, 12, 10, 8, 8),
    rater_spread: tuple[float, float] = RATER_SPREAD,
    songs: bool = False,
) -> Path:
    """Write the synthetic corpus under `root` in the SingMOS-Pro layout; returns `root`.

    Systems have about `clips_per_system` clips each (0.6-1.4 times as many); `rater_spread` and
    `songs` as in the module's docstring.

    The corpus is written to a temporary folder and renamed into place, so an interrupted
    generation leaves nothing half-written. An existing folder is never overwritten.
    """
    root = Path(root)
    if root.exists():
        raise CorpusError(f"{root}: already exists; refusing to overwrite it")
    try:
        with atomic_dir(root) as tmp:
            _write(tmp, seed, clips_per_system, systems_per_batch, _checked_spread(rater_spread), songs)
    except OSError:
        # Another process (a parallel run) finished the same corpus first: use theirs.
        if not (root / "info" / "synthetic.json").is_file():
            raise
    return root


def _checked_spread(rater_spread: Sequence[float]) -> tuple[float, float]:
    """`rater_spread` as (low, high); CorpusError unless 0 < low <= high, both finite."""
    values = tuple(float(v) for v in rater_spread)
    if len(values) != 2 or not all(np.isfinite(values)) or not 0 < values[0] <= values[1]:
        found = list(rater_spread)
        raise CorpusError(f"rater_spread must be [low, high] with 0 < low <= high, found {found}")
    return values[0], values[1]


def _write(
    root: Path,
    seed: int,
    clips_per_system: int,
    systems_per_batch: tuple[int, ...],
    rater_spread: tuple[float, float],
    songs: bool,
) -> None:
    (root / "wav").mkdir(parents=True)
    (root / "info").mkdir()
    master = np.random.default_rng(seed)
    layout = np.random.default_rng([seed, LAYOUT_STREAM])
    pool = recipe_pool(master)
    # One rating noise per recipe, so a recipe's systems in different batches share it.
    noise_sd = np.random.default_rng([seed, SPREAD_STREAM]).uniform(*rater_spread, size=len(pool))
    split, utterances, systems, sys_info = {}, {}, {}, {}
    sys_counter = 0
    for b, (batch, n_sys) in enumerate(zip(BATCHES, systems_per_batch, strict=True)):
        bias, gain = master.normal(0, 0.35), master.uniform(0.8, 1.15)
        judge_rng = np.random.default_rng([seed, b, JUDGE_STREAM])
        judge_pool = [f"{batch}-j{j:02d}" for j in range(JUDGES_PER_BATCH)]
        leniency = judge_rng.normal(0, JUDGE_LENIENCY_STD, JUDGES_PER_BATCH)
        chosen = [pool[0]] + [
            pool[i] for i in master.choice(np.arange(1, len(pool)), n_sys - 1, replace=False)
        ]
        split[batch] = {"train": [], "valid": [], "test": []}
        has_test = batch in TEST_BATCHES
        for position, recipe in enumerate(chosen):
            n_clips = max(1, round(clips_per_system * layout.uniform(*CLIP_COUNT_SPREAD)))
            long_seconds = layout.uniform(*LONG_SECONDS)
            # The second system of a batch has a long last (training) clip, the third system of a
            # test batch a long first (test) clip.
            long_clips = set()
            if position == 1 % n_sys and _split_of(n_clips - 1, n_clips, has_test) == "train":
                long_clips.add(n_clips - 1)
            if position == 2 % n_sys and _split_of(0, n_clips, has_test) == "test":
                long_clips.add(0)
            sys_counter += 1
            sys_id = f"sys{sys_counter:04d}"
            sd = float(noise_sd[pool.index(recipe)])
            sys_info[sys_id] = {
                "sample_rate": recipe.sample_rate,
                "tag": {"domain_id": b},
                "type": recipe.kind,
                "model": f"{recipe.kind}-{recipe.param:g}",
                "dataset": "synthetic",
            }
            if rater_spread != RATER_SPREAD:
                sys_info[sys_id]["rater_spread"] = sd
            sys_scores = []
            for u in range(n_clips):
                utt_id = f"{sys_id}-utt{u + 1:04d}"
                rng = np.random.default_rng([seed, sys_counter, u])
                sr = recipe.sample_rate
                seconds = long_seconds if u in long_clips else None
                shared = songs and u not in long_clips
                # A shared song's notes come first from its own stream, the same for every system.
                tune = np.random.default_rng([seed, b, u, SONG_STREAM]) if shared else rng
                f0, voiced, _ = melody(tune, SYNTH_RATE, recipe.kind, recipe.param, seconds)
                wav = resample(sing(rng, f0, voiced), SYNTH_RATE, sr)
                wav = degrade(rng, wav, sr, recipe)
                wav = 0.5 * wav / (np.abs(wav).max() + 1e-9) * rng.uniform(0.5, 1.0)
                path = os_path(root / "wav" / f"{utt_id}.wav")
                sf.write(path, wav.astype(np.float32), sr, subtype="PCM_16")
                quality = recipe.quality + rng.normal(0, 0.15)
                raw = 3.0 + gain * (quality - 3.0) + bias + rng.normal(0, sd, size=5)
                ratings = np.clip(np.rint(raw), 1, 5).astype(int).tolist()
                mos = float(np.mean(ratings))
                sys_scores.append(mos)
                labels = np.random.default_rng([seed, sys_counter, u, LABEL_STREAM])
                judges, given = assign_judges(labels, ratings, judge_pool, leniency)
                score = {"mos": mos, "judges": judges, "scores": given}
                if batch in DIMENSION_BATCHES:
                    for dim, latent in dimension_quality(recipe).items():
                        dim_raw = 3.0 + gain * (latent + labels.normal(0, 0.15) - 3.0) + bias
                        dim_ratings = np.clip(np.rint(dim_raw + labels.normal(0, 0.5, size=5)), 1, 5)
                        score[dim] = float(np.mean(dim_ratings))
                utterances[utt_id] = {"sys_id": sys_id, "wav": f"wav/{utt_id}.wav", "score": score}
                if shared:
                    utterances[utt_id]["song"] = f"{batch}-song{u + 1:03d}"
                part = _split_of(u, n_clips, has_test)
                split[batch][part].append(utt_id)
            systems[sys_id] = {"mos": float(np.mean(sys_scores))}
    info = root / "info"
    (info / "split.json").write_text(json.dumps(split, indent=1, allow_nan=False), encoding="utf-8")
    (info / "score.json").write_text(
        json.dumps({"utterance": utterances, "system": systems}, indent=1, allow_nan=False), encoding="utf-8"
    )
    (info / "sys_info.json").write_text(json.dumps(sys_info, indent=1, allow_nan=False), encoding="utf-8")
    record = signature(seed, clips_per_system, systems_per_batch, rater_spread, songs)
    (info / "synthetic.json").write_text(json.dumps(record, allow_nan=False), encoding="utf-8")


def _split_of(index: int, n: int, has_test: bool) -> str:
    """Train/valid/test assignment of the index-th clip of a system (about 60/15/25 %)."""
    n_test = round(0.3 * n) if has_test else 0
    n_valid = max(1, round(0.15 * n))
    if index < n_test:
        return "test"
    if index < n_test + n_valid:
        return "valid"
    return "train"


def load_synthetic(
    root: str | Path,
    seed: int = 0,
    clips_per_system: int = 14,
    systems_per_batch: tuple[int, ...] = (12, 12, 10, 8, 8),
    sample_rate_filter: int | None = None,
    allow_generate: bool = True,
    rater_spread: Sequence[float] = RATER_SPREAD,
    songs: bool = False,
) -> Corpus:
    """Read the synthetic corpus at `root`, generated first if the folder does not exist (and allowed)."""
    root = Path(root)
    systems_per_batch = tuple(systems_per_batch)
    rater_spread = _checked_spread(rater_spread)
    if not root.exists():
        if not allow_generate:
            raise CorpusError(f"{root}: no synthetic corpus there (allow_generate is false)")
        generate(root, seed, clips_per_system, systems_per_batch, rater_spread, songs)
    marker = root / "info" / "synthetic.json"
    expected = signature(seed, clips_per_system, systems_per_batch, rater_spread, songs)
    if signature_at(marker, root) != expected:
        options = f", rater_spread={list(rater_spread)}, songs={songs}"
        raise CorpusError(
            f"{marker}: {root} holds a different corpus than seed={seed}, clips_per_system="
            f"{clips_per_system}, systems_per_batch={list(systems_per_batch)}{options} of format "
            f"{FORMAT_VERSION}; choose another root, or delete it to regenerate (a corpus of an older format)"
        )
    return read_singmos_pro(root, TEST_BATCHES, sample_rate_filter)
