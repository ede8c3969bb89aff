"""How accompaniment affects the vocal-activity gate: frame accuracy, span error and score drift.

    .venv/bin/python recipes/vocal_activity/accompaniment.py [--export outputs/demo/export] [--songs 20]

Each song is a synthetic sung phrase of 4 s (`sqa.data.singing`) placed after a 2 s lead-in and
before a 2 s tail, at 16 kHz. The lead-in and tail hold either digital silence or the song's
accompaniment alone (an intro and outro); the accompaniment is a chord pad (root, third, fifth,
re-struck every second) under the whole clip, at a voice-to-accompaniment ratio (VAR, dB of RMS
over the sung part) of no accompaniment, 20, 10 or 0 dB. The truth is the melody's own voicing
(a frame is sung when most of its samples are). Reported per condition, as means over songs:

- frame accuracy, precision and recall of `sqa.data.vocal.vocal_activity(...).vocal` against it;
- the span error: |start - sung start| + |stop - sung stop| of `span` in seconds;
- with `--export`, the score drift: the clip's `vocal_only` score minus the score of the same mix
  cut to the sung part by the truth, beside the plain (untrimmed) score's drift.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from sqa.data.singing import SYNTH_RATE, melody, sing
from sqa.data.vocal import FRAME_SECONDS, vocal_activity

SONG_SECONDS, LEAD_SECONDS = 4.0, 2.0
VARS = (None, 20.0, 10.0, 0.0)
SURROUNDS = ("silence", "accompaniment")


def chord_pad(samples: int, root_hz: float) -> np.ndarray:
    """A major-triad pad (samples,) at SYNTH_RATE, re-struck every second, of unit RMS."""
    t = np.arange(samples) / SYNTH_RATE
    pad = sum(np.sin(2 * np.pi * root_hz * 2 ** (s / 12) * t) for s in (0, 4, 7)) * np.exp(-1.5 * (t % 1.0))
    return pad / np.sqrt(np.mean(pad**2))


def song(
    rng: np.random.Generator, var_db: float | None, surround: str
) -> tuple[np.ndarray, np.ndarray, slice]:
    """A mix (N,), its sung frames (F,) and the sung part's sample slice."""
    f0, voiced, notes = melody(rng, SYNTH_RATE, "clean", 0.0, SONG_SECONDS)
    voice = sing(rng, f0, voiced)
    voice = 0.1 * voice / np.sqrt(np.mean(voice**2))
    lead = int(LEAD_SECONDS * SYNTH_RATE)
    total = voice.size + 2 * lead
    mix = np.zeros(total)
    mix[lead : lead + voice.size] = voice
    truth = np.zeros(total, dtype=bool)
    truth[lead : lead + voice.size] = voiced > 0.5
    if var_db is not None:
        pad = chord_pad(total, 440.0 * 2 ** ((min(notes) - 12 - 69) / 12))
        pad *= 0.1 * 10 ** (-var_db / 20)
        if surround == "silence":
            pad[:lead] = 0.0
            pad[lead + voice.size :] = 0.0
        mix += pad
    hop = round(FRAME_SECONDS * SYNTH_RATE)
    frames = -(-total // hop)
    padded = np.zeros(frames * hop, dtype=bool)
    padded[:total] = truth
    sung = padded.reshape(frames, hop).mean(axis=1) > 0.5
    return mix.astype(np.float32), sung, slice(lead, lead + voice.size)


def measure(songs: int, export: Path | None) -> list[dict[str, float | str]]:
    """One row of means per (surround, VAR) condition."""
    scorer = None
    if export is not None:
        import sqa

        trimmed_scorer = sqa.load(export, vocal_only=True)
        scorer = sqa.load(export)
    rows = []
    for surround in SURROUNDS:
        for var_db in VARS:
            if var_db is None and surround == "accompaniment":
                continue
            rng = np.random.default_rng(0)
            acc, prec, rec, span_err, drift, plain_drift = [], [], [], [], [], []
            for _ in range(songs):
                mix, sung, part = song(rng, var_db, surround)
                activity = vocal_activity(mix, SYNTH_RATE)
                vocal = activity.vocal[: sung.size]
                acc.append(float(np.mean(vocal == sung)))
                prec.append(float(sung[vocal].mean()) if vocal.any() else float("nan"))
                rec.append(float(vocal[sung].mean()))
                span = activity.span(mix.size)
                if span is None:
                    span_err.append(float("nan"))
                else:
                    span_err.append((abs(span[0] - part.start) + abs(span[1] - part.stop)) / SYNTH_RATE)
                if scorer is not None:
                    truth_score = scorer.score(mix[part], SYNTH_RATE)
                    gated = trimmed_scorer.score(mix, SYNTH_RATE)
                    drift.append(float("nan") if gated is None else gated - truth_score)
                    plain_drift.append(scorer.score(mix, SYNTH_RATE) - truth_score)
            row: dict[str, float | str] = {
                "surround": surround,
                "VAR": "none" if var_db is None else f"{var_db:g} dB",
                "accuracy": np.nanmean(acc),
                "precision": np.nanmean(prec),
                "recall": np.nanmean(rec),
                "span error s": np.nanmean(span_err),
            }
            if scorer is not None:
                row["drift vocal_only"] = np.nanmean(np.abs(drift))
                row["drift plain"] = np.nanmean(np.abs(plain_drift))
            rows.append(row)
    return rows


def main() -> None:
    """Print the table of `measure` as Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--songs", type=int, default=20)
    parser.add_argument("--export", type=Path, default=None, help="an export to measure score drift with")
    args = parser.parse_args()
    rows = measure(args.songs, args.export)
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("| " + " | ".join("---" for _ in keys) + " |")
    for row in rows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()) + " |")


if __name__ == "__main__":
    main()
