"""Command line: score audio files, folders or manifests with an exported checkpoint.

    sqa-score --checkpoint <export dir | run dir | model.pt> [--output scores.csv|scores.json] INPUT...

INPUT is an audio file, a folder (searched recursively for audio files), a CSV manifest with a
`wav_path` column (relative paths resolve against the CSV's folder; its other columns are passed
through to the output, renamed `manifest_<name>` where they clash with an output column) or a
.txt list of paths. Output columns: `path, score` (the overall MOS), `score_<dim>` for each other
score dimension of the model, then the manifest columns. The output is checked before anything is
scored and written atomically at the end; an existing file is replaced only with `--overwrite`,
an input never. Every input that cannot be scored is reported on stderr and the exit code is 1;
the rest is still scored and written. Exit code 2: bad arguments, output path or export.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqa.atomic import atomic_write_text, json_text

if TYPE_CHECKING:
    from sqa.scoring import ScoreResult

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".aiff", ".aif", ".mp3", ".opus"}
OUTPUT_SUFFIXES = (".csv", ".json")


@dataclass
class Inputs:
    """Audio paths named by the inputs, each with its manifest columns, and what could not be read."""

    paths: list[str] = field(default_factory=list)
    columns: list[dict[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, path: Path | str, columns: dict[str, str] | None = None) -> None:
        """Add one audio path with its manifest columns."""
        self.paths.append(str(path))
        self.columns.append(columns or {})


def _resolve_against(base: Path, entry: str) -> Path:
    path = Path(entry)
    return path if path.is_absolute() else base / path


def _read_manifest(path: Path, inputs: Inputs) -> None:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            columns = list(reader.fieldnames or [])
    except UnicodeDecodeError as err:
        inputs.problems.append(f"{path}: not UTF-8 text ({err}); save the manifest as UTF-8")
        return
    except (csv.Error, OSError) as err:
        inputs.problems.append(f"{path}: cannot read the CSV manifest ({err})")
        return
    if "wav_path" not in columns:
        inputs.problems.append(
            f"{path}: the CSV manifest has no wav_path column (columns: {', '.join(columns)})"
        )
    elif not rows:
        inputs.problems.append(f"{path}: the manifest holds no rows")
    else:
        for line, row in enumerate(rows, start=2):
            if not (row.get("wav_path") or "").strip():
                inputs.problems.append(f"{path}, line {line}: empty wav_path")
                continue
            extra = {k: v for k, v in row.items() if k != "wav_path" and k is not None}
            inputs.add(_resolve_against(path.parent, row["wav_path"].strip()), extra)


def _read_list(path: Path, inputs: Inputs) -> None:
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except UnicodeDecodeError as err:
        inputs.problems.append(f"{path}: not UTF-8 text ({err})")
        return
    entries = [line for line in lines if line]
    if not entries:
        inputs.problems.append(f"{path}: the list names no files")
    for entry in entries:
        inputs.add(_resolve_against(path.parent, entry))


def expand_inputs(items: Sequence[str]) -> Inputs:
    """Audio paths named by files, folders, CSV manifests (wav_path column) and .txt lists."""
    inputs = Inputs()
    for item in items:
        path = Path(item)
        if not path.exists():
            inputs.problems.append(f"{path}: does not exist")
        elif path.is_dir():
            found = [p for p in sorted(path.rglob("*")) if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file()]
            if not found:
                suffixes = ", ".join(sorted(AUDIO_SUFFIXES))
                inputs.problems.append(f"{path}: the folder holds no audio files ({suffixes})")
            for p in found:
                inputs.add(p)
        elif path.suffix.lower() == ".csv":
            _read_manifest(path, inputs)
        elif path.suffix.lower() == ".txt":
            _read_list(path, inputs)
        else:
            inputs.add(path)
    return inputs


def check_output(output: Path, overwrite: bool, inputs: Sequence[str]) -> str | None:
    """Why `output` must not be written (None if it may): wrong suffix, no folder, an input, exists."""
    if output.suffix.lower() not in OUTPUT_SUFFIXES:
        return f"{output}: the output must end in .csv or .json"
    if not output.parent.is_dir():
        return f"{output}: the folder {output.parent} does not exist"
    target = output.resolve()
    if any(Path(p).resolve() == target for p in inputs):
        return f"{output}: is one of the inputs; sqa-score never overwrites an input"
    if output.is_dir():
        return f"{output}: is a folder"
    if output.exists() and not overwrite:
        return f"{output}: already exists; pass --overwrite to replace it"
    return None


def systems_output(output: Path) -> Path:
    """Where `--by-system` writes per-system means: scores.csv -> scores.systems.csv."""
    return output.with_name(f"{output.stem}.systems{output.suffix}")


def system_of(path: str, columns: dict[str, str]) -> str | None:
    """A clip's system: its manifest's system_id, else the `<sys>` of a `<sys>-<utt>` file name."""
    if columns.get("system_id"):
        return columns["system_id"]
    parts = Path(path).stem.split("-")
    # SingMOS-Pro names clips sys0001-utt0001, VMC'24 voicemos2024-track2-sys0001-utt0001.
    return parts[-2] if len(parts) >= 2 and parts[-2] else None


def _table(rows: list[dict[str, Any]], output: Path | None) -> str:
    if output is not None and output.suffix.lower() == ".json":
        return json_text(rows, indent=1) + "\n"
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: repr(v) if isinstance(v, float) else v for k, v in row.items()} for row in rows)
    return buffer.getvalue()


def _emit(rows: list[dict[str, Any]], output: Path | None) -> None:
    text = _table(rows, output)
    if output is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(output, text)


def clip_rows(
    results: Sequence[ScoreResult], inputs: Inputs, dimensions: Sequence[str], by_system: bool
) -> list[dict[str, Any]]:
    """One output row per scored clip, in input order: path, scores, [system_id], manifest columns."""
    reserved = ["path", "score", *(f"score_{d}" for d in dimensions)]
    if by_system:
        reserved.append("system_id")
    rows = []
    for r in results:
        if r.error is not None:
            continue
        row: dict[str, Any] = {"path": r.path, "score": r.score}
        row.update({f"score_{d}": r.dimension_scores[d] for d in dimensions})
        if by_system:
            row["system_id"] = system_of(r.path, inputs.columns[r.index])
        for key, value in inputs.columns[r.index].items():
            if by_system and key == "system_id":
                continue
            row[f"manifest_{key}" if key in reserved else key] = value
        rows.append(row)
    names = list(dict.fromkeys(k for row in rows for k in row))
    return [{k: row.get(k, "") for k in names} for row in rows]


def system_rows(rows: list[dict[str, Any]], dimensions: Sequence[str]) -> list[dict[str, Any]]:
    """Per-system means of every score column over that system's clips, sorted by system."""
    columns = ["score", *(f"score_{d}" for d in dimensions)]
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["system_id"], []).append(row)
    return [
        {
            "system_id": system,
            "n": len(members),
            **{c: sum(m[c] for m in members) / len(members) for c in columns},
        }
        for system, members in sorted(groups.items())
    ]


def default_workers() -> int:
    """Half the CPU cores (at least 1, at most 4) decode while the rest run the model."""
    return min(4, max(1, (os.cpu_count() or 1) // 2))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sqa-score",
        description="Score audio files, folders or manifests with an exported sqa checkpoint.",
        epilog="Documentation: docs/scoring.md",
    )
    parser.add_argument(
        "--checkpoint", required=True, help="export directory, run directory holding export/, or model.pt"
    )
    parser.add_argument("--output", help="output .csv or .json (default: CSV on stdout)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    parser.add_argument(
        "--batch-size", type=int, default=8, help="clips (or windows) per forward pass (default: %(default)s)"
    )
    parser.add_argument(
        "--num-workers",
        type=int,
        default=default_workers(),
        help="decoding processes, 0: none (default: %(default)s)",
    )
    parser.add_argument(
        "--device", default="auto", help="auto (the GPU when present; the default), cpu, cuda, cuda:1, ..."
    )
    parser.add_argument(
        "--domain", help="domain name or index for models trained with domain IDs (default: the first domain)"
    )
    parser.add_argument(
        "--chunk-seconds",
        type=float,
        help="score clips longer than this in windows of about this length, combined weighted by frames",
    )
    parser.add_argument(
        "--by-system",
        action="store_true",
        help="also write per-system means to <output>.systems.csv|json (system: the manifest's "
        "system_id, else <sys> of a <sys>-<utt> file name)",
    )
    parser.add_argument("inputs", nargs="+", help="audio files, folders, CSV manifests or .txt lists")
    return parser


def _argument_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.batch_size < 1:
        problems.append(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.num_workers < 0:
        problems.append(f"--num-workers must be 0 or more, got {args.num_workers}")
    if args.chunk_seconds is not None and not args.chunk_seconds > 0:
        problems.append(f"--chunk-seconds must be positive, got {args.chunk_seconds}")
    if args.by_system and not args.output:
        problems.append("--by-system writes a second table beside --output: give --output")
    return problems


def _fail(messages: Sequence[str], code: int) -> int:
    for message in messages:
        print(f"sqa-score: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-score`; returns the exit code."""
    args = _parser().parse_args(argv)
    problems = _argument_problems(args)
    if problems:
        return _fail(problems, 2)
    inputs = expand_inputs(args.inputs)
    output = Path(args.output) if args.output else None
    outputs = [] if output is None else [output, systems_output(output)] if args.by_system else [output]
    named = [*args.inputs, *inputs.paths]
    problems = [p for p in (check_output(o, args.overwrite, named) for o in outputs) if p is not None]
    if args.by_system:
        unknown = [p for p, c in zip(inputs.paths, inputs.columns, strict=True) if system_of(p, c) is None]
        if unknown:
            problems.append(
                f"--by-system: cannot tell the system of {len(unknown)} clip(s), e.g. {unknown[0]}: name "
                "them <sys>-<utt> or give a manifest with a system_id column"
            )
    if problems:
        return _fail(problems, 2)

    # Imported only now, so that --help and argument errors come back without loading torch.
    from sqa.export import ExportError
    from sqa.extras import MissingExtraError
    from sqa.scoring import Scorer

    try:
        scorer = Scorer(args.checkpoint, args.device, args.batch_size, args.domain, args.chunk_seconds)
    except (ExportError, ValueError, MissingExtraError) as err:
        return _fail([str(err)], 2)
    if not inputs.paths:
        return _fail([*inputs.problems, "nothing to score; no output written"], 1)
    results: list[ScoreResult | None] = [None] * len(inputs.paths)
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(results), unit="clip", file=sys.stderr)
    try:
        for result in scorer.score_files(inputs.paths, args.num_workers):
            results[result.index] = result
            if bar is not None:
                bar.update()
    except MissingExtraError as err:  # e.g. the f0 extractor of a model with a pitch branch
        return _fail([str(err)], 2)
    finally:
        if bar is not None:
            bar.close()
    done = [r for r in results if r is not None]
    rows = clip_rows(done, inputs, scorer.dimensions[1:], args.by_system)
    messages = [*inputs.problems, *(r.error for r in done if r.error is not None)]
    messages += [f"warning: {r.path}: {r.warning}" for r in done if r.warning is not None]
    if rows:
        _emit(rows, output)
        if args.by_system:
            _emit(system_rows(rows, scorer.dimensions[1:]), systems_output(output))
    elif output is not None:
        messages.append(f"no input could be scored; {output} was not written")
    failed = len(inputs.problems) + sum(r.error is not None for r in done)
    if failed:
        messages.append(f"{failed} input(s) could not be scored; {len(rows)} clip(s) scored")
    return _fail(messages, 1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
