"""Check a downloaded SingMOS-Pro folder and optionally write a 16 kHz copy of it.

    python recipes/singmos_pro/prepare.py /data/SingMOS-Pro                  # check + summary
    python recipes/singmos_pro/prepare.py /data/SingMOS-Pro --resample /data/SingMOS-Pro-16k

The summary shows, per split and test set, the clips and systems that the paper's 16 kHz filter
keeps and the clips that resampling would add. `--resample` writes every clip at 16 kHz (the
`info/` files are copied unchanged) so that training can use all clips without resampling on load;
`data.corpus.sample_rate_filter=null` resamples on load instead.
"""

from __future__ import annotations

import argparse
import shutil
from collections import Counter
from pathlib import Path

import soundfile as sf

from sqa.data.audio import audio_info, load_audio
from sqa.data.readers import read_singmos_pro


def summary(root: Path) -> str:
    """Clip and system counts per split / test set, all clips and 16 kHz clips only."""
    corpus = read_singmos_pro(root)
    rates = {c.sample_id: audio_info(c.path)[0] for c in corpus.clips}
    lines = [f"{root}: {len(corpus.clips)} clips, sample rates {dict(Counter(rates.values()))}"]
    groups = {"train": corpus.split("train"), **{f"valid {d}": v for d, v in corpus.valid_sets().items()}}
    groups.update(corpus.test_sets())
    for name, clips in groups.items():
        kept = [c for c in clips if rates[c.sample_id] == 16000]
        lines.append(
            f"  {name:<28} all: {len(clips):>5} clips {len({c.system_id for c in clips}):>4} systems"
            f" | 16 kHz: {len(kept):>5} clips {len({c.system_id for c in kept}):>4} systems"
        )
    return "\n".join(lines)


def resample_copy(root: Path, out: Path, sample_rate: int = 16000) -> None:
    """Write every clip of `root` at `sample_rate` under `out`, same layout; `out` must not exist."""
    if out.exists():
        raise FileExistsError(f"{out} exists; choose a new folder")
    corpus = read_singmos_pro(root)
    shutil.copytree(root / "info", out / "info")
    for clip in corpus.clips:
        target = out / clip.path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        sf.write(target, load_audio(clip.path, sample_rate), sample_rate, subtype="PCM_16")


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--resample", type=Path, help="write a 16 kHz copy of the corpus here")
    args = parser.parse_args()
    print(summary(args.root))
    if args.resample:
        resample_copy(args.root, args.resample)
        print(f"wrote a 16 kHz copy to {args.resample}")


if __name__ == "__main__":
    main()
