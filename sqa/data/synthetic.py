"""The built-in synthetic singing corpus, written in the SingMOS-Pro layout.

Sung phrases (harmonic source with vibrato, vowel formants, note glides, breath gaps) from random
melodies are passed through "systems": degradation recipes whose severity sets a latent quality
(both in `sqa.data.singing`).
Each annotation batch p1..p5 has its own rater bias and scale; every clip gets five integer
ratings whose mean is its MOS. Everything is deterministic from the seed.

Beyond the overall MOS, the clips of some batches (`DIMENSION_BATCHES`) carry lyrics and melody
MOS driven by different degradations: melody by the pitch errors, lyrics by the spectral ones
(noise, band limit, bit depth) that cost intelligibility. The five ratings of each clip are by
five judges drawn from a pool per batch, each judge with a leniency of its own. These labels
come from random streams of their own, so the audio and the overall MOS are those that the
corpus had before it had them.

Clips are sung phrases of about 1-3.5 s, except one long clip (12-20 s, longer than the default
training crop of 10 s) among the training clips of one system per batch and among the test clips
of another system per test batch; systems have unequal clip counts (0.6-1.4 times
`clips_per_system`). So training crops (and the f0 slice that follows them), whole-clip scoring
of long clips and the clip- versus system-weighted averages over test sets are all exercised.
The clip counts and long-clip lengths come from a random stream of their own.

`load_synthetic_mushra` rates the same clips as a MUSHRA-style listening test: 0-100, a hidden
reference and an anchor per batch, replicate ratings, one CSV row per listener rating.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import soundfile as sf

from sqa.core.atomic import atomic_dir, atomic_write_text
from sqa.data.audio import os_path, resample
from sqa.data.corpus import Corpus, CorpusError
from sqa.data.readers import read_csv_manifest, read_singmos_pro
from sqa.data.singing import SYNTH_RATE, SystemRecipe, degrade, melody, recipe_pool, sing

BATCHES = ("singmospro-p1", "singmospro-p2", "singmospro-p3", "singmospro-p4", "singmospro-p5")
TEST_BATCHES = BATCHES[:3]
FORMAT_VERSION = 5
# Batches whose clips have lyrics and melody MOS (SingMOS-Pro has them for part of its batches).
DIMENSION_BATCHES = BATCHES[0], BATCHES[1], BATCHES[3]
PITCH_KINDS = frozenset({"detune", "drift", "jitter", "note_detune"})
SPECTRAL_KINDS = frozenset({"noise", "lowpass", "bits"})
# Judges per batch pool; the spread of their leniencies and of the noise in ordering by it.
JUDGES_PER_BATCH = 12
JUDGE_LENIENCY_STD = 0.5
JUDGE_ORDER_NOISE = 0.3
# Keys of the random streams of the labels added after format 3, apart from the audio's streams.
LABEL_STREAM, JUDGE_STREAM = 1, 2
# Key of the random stream of the layout (clip counts per system, long-clip lengths).
LAYOUT_STREAM = 3
# A system's clip count is `clips_per_system` times a factor drawn from this range.
CLIP_COUNT_SPREAD = (0.6, 1.4)
# Length range (seconds) of the long clips.
LONG_SECONDS = (12.0, 20.0)


def _dimension_quality(recipe: SystemRecipe) -> dict[str, float]:
    """Latent lyrics and melody quality of a system: each hurt only by its own degradations."""
    severity = 4.6 - recipe.quality
    if recipe.kind in PITCH_KINDS:
        return {"lyrics": 4.5, "melody": 4.6 - 1.2 * severity}
    if recipe.kind in SPECTRAL_KINDS:
        return {"lyrics": 4.6 - 1.1 * severity, "melody": 4.5}
    return {"lyrics": 4.6, "melody": 4.6}


def _assign_judges(
    rng: np.random.Generator, ratings: list[int], pool: list[str], leniency: np.ndarray
) -> tuple[list[str], list[int]]:
    """Five judges of the pool for a clip's ratings, the more lenient ones on the higher ratings.

    The clip's ratings (hence its MOS) stay as drawn; only who gave which one follows the
    judges' leniency (with noise), so a judge's ratings deviate from the clip means by its bias.
    """
    chosen = rng.choice(len(pool), size=len(ratings), replace=False)
    order = np.argsort(leniency[chosen] + rng.normal(0, JUDGE_ORDER_NOISE, len(chosen)), kind="stable")
    by_rank = sorted(ratings)
    given = [0] * len(ratings)
    for rank, position in enumerate(order):
        given[int(position)] = by_rank[rank]
    return [pool[int(j)] for j in chosen], given


def generate(
    root: str | Path,
    seed: int = 0,
    clips_per_system: int = 14,
    systems_per_batch: tuple[int, ...] = (12, 12, 10, 8, 8),
) -> Path:
    """Write the synthetic corpus under `root` in the SingMOS-Pro layout; returns `root`.

    Systems have about `clips_per_system` clips each (0.6-1.4 times as many).

    The corpus is written to a temporary folder and renamed into place, so an interrupted
    generation leaves nothing half-written. An existing folder is never overwritten.
    """
    root = Path(root)
    if root.exists():
        raise CorpusError(f"{root}: already exists; refusing to overwrite it")
    try:
        with atomic_dir(root) as tmp:
            _write(tmp, seed, clips_per_system, systems_per_batch)
    except OSError:
        # Another process (a parallel run) finished the same corpus first: use theirs.
        if not (root / "info" / "synthetic.json").is_file():
            raise
    return root


def _write(root: Path, seed: int, clips_per_system: int, systems_per_batch: tuple[int, ...]) -> None:
    (root / "wav").mkdir(parents=True)
    (root / "info").mkdir()
    master = np.random.default_rng(seed)
    layout = np.random.default_rng([seed, LAYOUT_STREAM])
    pool = recipe_pool(master)
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
            sys_info[sys_id] = {
                "sample_rate": recipe.sample_rate,
                "tag": {"domain_id": b},
                "type": recipe.kind,
                "model": f"{recipe.kind}-{recipe.param:g}",
                "dataset": "synthetic",
            }
            sys_scores = []
            for u in range(n_clips):
                utt_id = f"{sys_id}-utt{u + 1:04d}"
                rng = np.random.default_rng([seed, sys_counter, u])
                sr = recipe.sample_rate
                seconds = long_seconds if u in long_clips else None
                f0, voiced, _ = melody(rng, SYNTH_RATE, recipe.kind, recipe.param, seconds)
                wav = resample(sing(rng, f0, voiced), SYNTH_RATE, sr)
                wav = degrade(rng, wav, sr, recipe)
                wav = 0.5 * wav / (np.abs(wav).max() + 1e-9) * rng.uniform(0.5, 1.0)
                path = os_path(root / "wav" / f"{utt_id}.wav")
                sf.write(path, wav.astype(np.float32), sr, subtype="PCM_16")
                quality = recipe.quality + rng.normal(0, 0.15)
                raw = 3.0 + gain * (quality - 3.0) + bias + rng.normal(0, 0.5, size=5)
                ratings = np.clip(np.rint(raw), 1, 5).astype(int).tolist()
                mos = float(np.mean(ratings))
                sys_scores.append(mos)
                labels = np.random.default_rng([seed, sys_counter, u, LABEL_STREAM])
                judges, given = _assign_judges(labels, ratings, judge_pool, leniency)
                score = {"mos": mos, "judges": judges, "scores": given}
                if batch in DIMENSION_BATCHES:
                    for dim, latent in _dimension_quality(recipe).items():
                        dim_raw = 3.0 + gain * (latent + labels.normal(0, 0.15) - 3.0) + bias
                        dim_ratings = np.clip(np.rint(dim_raw + labels.normal(0, 0.5, size=5)), 1, 5)
                        score[dim] = float(np.mean(dim_ratings))
                utterances[utt_id] = {"sys_id": sys_id, "wav": f"wav/{utt_id}.wav", "score": score}
                part = _split_of(u, n_clips, has_test)
                split[batch][part].append(utt_id)
            systems[sys_id] = {"mos": float(np.mean(sys_scores))}
    info = root / "info"
    (info / "split.json").write_text(json.dumps(split, indent=1, allow_nan=False), encoding="utf-8")
    (info / "score.json").write_text(
        json.dumps({"utterance": utterances, "system": systems}, indent=1, allow_nan=False), encoding="utf-8"
    )
    (info / "sys_info.json").write_text(json.dumps(sys_info, indent=1, allow_nan=False), encoding="utf-8")
    (info / "synthetic.json").write_text(
        json.dumps(_signature(seed, clips_per_system, systems_per_batch), allow_nan=False), encoding="utf-8"
    )


def _split_of(index: int, n: int, has_test: bool) -> str:
    """Train/valid/test assignment of the index-th clip of a system (about 60/15/25 %)."""
    n_test = round(0.3 * n) if has_test else 0
    n_valid = max(1, round(0.15 * n))
    if index < n_test:
        return "test"
    if index < n_test + n_valid:
        return "valid"
    return "train"


def _signature(seed: int, clips_per_system: int, systems_per_batch: tuple[int, ...]) -> dict:
    return {
        "format": FORMAT_VERSION,
        "seed": seed,
        "clips_per_system": clips_per_system,
        "systems_per_batch": list(systems_per_batch),
    }


def _signature_at(marker: Path, root: Path) -> object:
    """The settings a corpus generated at `root` recorded in `marker`; CorpusError if none or unreadable."""
    if not marker.is_file():
        raise CorpusError(
            f"{root}: not a corpus sqa generated (no {marker.relative_to(root)}); choose another root"
        )
    try:
        return json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CorpusError(f"{marker}: unreadable ({err}); choose another root") from err


def load_synthetic(
    root: str | Path,
    seed: int = 0,
    clips_per_system: int = 14,
    systems_per_batch: tuple[int, ...] = (12, 12, 10, 8, 8),
    sample_rate_filter: int | None = None,
    allow_generate: bool = True,
) -> Corpus:
    """Read the synthetic corpus at `root`, generated first if the folder does not exist (and allowed)."""
    root = Path(root)
    systems_per_batch = tuple(systems_per_batch)
    if not root.exists():
        if not allow_generate:
            raise CorpusError(f"{root}: no synthetic corpus there (allow_generate is false)")
        generate(root, seed, clips_per_system, systems_per_batch)
    marker = root / "info" / "synthetic.json"
    expected = _signature(seed, clips_per_system, systems_per_batch)
    if _signature_at(marker, root) != expected:
        raise CorpusError(
            f"{marker}: {root} holds a different corpus than seed={seed}, clips_per_system="
            f"{clips_per_system}, systems_per_batch={list(systems_per_batch)} of format {FORMAT_VERSION}; "
            "choose another root, or delete it to regenerate (a corpus of an older format)"
        )
    return read_singmos_pro(root, TEST_BATCHES, sample_rate_filter)


# The MUSHRA-style variant: the same clips rated 0-100 by listeners, one CSV row per rating.
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
    expected = {"format": MUSHRA_FORMAT_VERSION, **_signature(seed, clips_per_system, systems_per_batch)}
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
    if _signature_at(marker, root) != expected:
        raise CorpusError(
            f"{marker}: {root} holds another MUSHRA-style corpus than seed={seed}, clips_per_system="
            f"{clips_per_system}, systems_per_batch={list(systems_per_batch)}; choose another root"
        )
    return read_csv_manifest(manifest, score_range=MUSHRA_RANGE, replicates=replicates)
