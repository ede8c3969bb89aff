"""Where the time of `sqa-score --vocal-only --timeline` on a long song goes, phase by phase.

    .venv/bin/python benchmarks/vocal_timeline.py [--backbone logmel|distillmos | --export E] [--minutes 4]
        [--whole-pass]

The song is synthetic singing (`sqa.data.singing`: phrases of a random melody with breath gaps)
after a silent intro of `--intro` seconds, written as a 44.1 kHz stereo WAV, as a user's song
would be. The phases are those `sqa-score` runs for one file: the file scored (decoding,
resampling, trimming to the vocal span, the forward pass, whose frame scores are kept), then its
timeline laid out from those frames (decoding again, vocal activity, windows, the plot); the
network runs once. `--whole-pass` also times the second forward pass over the whole clip that
timelines took before, and prints how far its window scores lie from the kept frames'. Without `--export`, an
untrained default log-mel predictor is exported to a temporary folder (its timing is the
network's, not its training's); `--backbone distillmos` puts the pretrained Distill-MOS network
under it instead, as the default run's `distillmos` candidate (experiment=small_corpus) does.
Prints wall and CPU seconds per phase and of the whole command.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import torch

from sqa.data.audio import load_audio
from sqa.data.singing import SYNTH_RATE, melody, sing
from sqa.data.vocal import vocal_activity, vocal_part
from sqa.exports.format import export_predictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.distillmos import DistillMosBackbone
from sqa.models.predictor import MOSPredictor
from sqa.scoring.scorer import Scorer
from sqa.scoring.timeline import clip_timeline, write_timeline


def song(minutes: float, intro: float, seed: int) -> np.ndarray:
    """Stereo (N, 2) at SYNTH_RATE: `intro` s of digital silence, then phrases up to `minutes`."""
    rng = np.random.default_rng(seed)
    parts = [np.zeros(int(intro * SYNTH_RATE), dtype=np.float32)]
    total = int(minutes * 60 * SYNTH_RATE)
    while sum(p.size for p in parts) < total:
        f0, voiced, _ = melody(rng, SYNTH_RATE, "clean", 0.0, seconds=float(rng.uniform(3.0, 6.0)))
        parts.append(sing(rng, f0, voiced).astype(np.float32))
        parts.append(np.zeros(int(rng.uniform(0.2, 0.8) * SYNTH_RATE), dtype=np.float32))
    mono = np.concatenate(parts)[:total]
    mono = 0.5 * mono / max(float(np.abs(mono).max()), 1e-9)
    return np.stack([mono, 0.9 * mono], axis=1)


def timed(phases: dict[str, tuple[float, float]], name: str, call: Callable[[], Any]) -> Any:
    """Run `call`, adding its wall and CPU seconds (all threads) to `phases[name]`; return its result.

    CPU seconds move less than wall seconds with the load of other processes on a shared machine.
    """
    start, cpu = time.perf_counter(), time.process_time()
    out = call()
    wall, used = phases.get(name, (0.0, 0.0))
    phases[name] = (wall + time.perf_counter() - start, used + time.process_time() - cpu)
    return out


def main() -> None:
    """Print the seconds of each phase of scoring one long song with --vocal-only --timeline."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--export", help="an export folder or `distillmos` (default: an untrained head)")
    parser.add_argument("--backbone", choices=["logmel", "distillmos"], default="logmel")
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--intro", type=float, default=20.0, help="seconds of silence before the singing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--whole-pass", action="store_true", help="also time the whole-clip pass of before")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "song.wav"
        sf.write(path, song(args.minutes, args.intro, args.seed), SYNTH_RATE)
        export = args.export
        if export is None:
            torch.manual_seed(args.seed)
            backbone = LogMelBackbone() if args.backbone == "logmel" else DistillMosBackbone(pretrained=True)
            export = export_predictor(MOSPredictor(backbone), Path(tmp) / "export", 16000, ["d"])
        phases: dict[str, tuple[float, float]] = {}
        scorer = timed(phases, "load the export", lambda: Scorer(export, vocal_only=True))
        rate = scorer.sample_rate
        # What `score_files` does for the file, phase by phase (its own decoding and trimming).
        wav = timed(phases, "decode + resample", lambda: load_audio(path, rate))
        part = timed(phases, "vocal span (trim)", lambda: vocal_part(wav, rate))[0]
        # The scoring pass's frames (those its score pools), kept for the timeline.
        frames = timed(phases, "forward (score, frames kept)", lambda: scorer.frame_scores(part))
        # What `sqa-score --timeline` then does: `Scorer.timeline_of` and `write_timeline`.
        wav = timed(phases, "decode again (timeline)", lambda: load_audio(path, rate))
        timeline = timed(phases, "vocal activity + windows", lambda: scorer.timeline_of(wav, frames))
        if args.whole_pass:
            hop = int(scorer.predictor.backbone.hop_length)
            whole = timed(phases, "(before: forward over the whole clip)", lambda: scorer.frame_scores(wav))
            before = clip_timeline(whole, wav, rate, hop, activity=vocal_activity(wav, rate))
            both = np.isfinite(before.score) & np.isfinite(timeline.score)
            gap = np.abs(before.score[both] - timeline.score[both])
            said = f"max {gap.max():.4f}, mean {gap.mean():.4f} over {both.sum()} windows"
            print(f"window scores, before - after: {said}")
        folder = Path(tmp) / "timelines"
        folder.mkdir()
        timed(
            phases,
            "csv + png",
            lambda: write_timeline(folder, "song", timeline, "song", scorer.predictor.score_range, False),
        )
        # The whole command, as a user runs it.
        from sqa.scoring import cli

        command = ["--checkpoint", str(export), "--vocal-only", "--timeline", str(Path(tmp) / "cli")]
        command += ["--output", str(Path(tmp) / "s.csv"), "--num-workers", "0", str(path)]
        timed(phases, "sqa-score (the whole command)", lambda: cli.main(command))
    print(
        f"{args.minutes:g} min song ({args.intro:g} s silent intro), 44.1 kHz stereo, "
        f"export {args.export or 'untrained head on ' + args.backbone}, "
        f"{torch.get_num_threads()} torch thread(s)"
    )
    print(f"{'phase':<38} {'wall s':>8} {'cpu s':>8}")
    for name, (wall, used) in phases.items():
        print(f"{name:<38} {wall:8.2f} {used:8.2f}")


if __name__ == "__main__":
    main()
