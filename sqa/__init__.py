"""sqa: neural MOS prediction for singing quality.

    import sqa
    predictor = sqa.load("runs/my-run")          # an export dir, a run dir or a model.pt
    predictor = sqa.load("distillmos")           # a built-in predictor by name ("./distillmos": a path)
    predictor.score("song.wav")                  # one float per clip
    predictor.score(audio, sample_rate)          # arrays need their rate; lists give lists in order
                                                 # (samples,) or (samples, channels) is one clip,
                                                 # (clips, samples) a batch: (2, N) is two clips
    predictor.score("takes/").to_pandas()        # a folder: {path: score}, and its DataFrame
    predictor.score_files(paths).to_pandas()     # many files: one row each, in input order
    predictor.score_with_spread("song.wav")      # (score, spread, (lo90, hi90)); None spread without one

`import sqa` stays light: torch and the scoring code load on the first `sqa.load`; it registers
the `${sqa_precision:}` config resolver (`sqa.core.resolvers`) where omegaconf is installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqa.core.resolvers import register_resolvers

if TYPE_CHECKING:
    from sqa.scoring.scorer import Scorer

__version__ = "0.1.0"

register_resolvers()


def load(
    path: str | Path,
    device: str = "cpu",
    batch_size: int = 8,
    domain: str | int | None = None,
    chunk_seconds: float | None = None,
    max_samples: int | None = None,
    pooling: str | None = None,
    vocal_only: bool | None = None,
) -> Scorer:
    """Load an export (its directory, a run directory holding export/, or its model.pt) or a built-in.

    A built-in predictor's name (`sqa.scoring.named.NAMED_PREDICTORS`: "distillmos") is always the
    built-in, whatever the working directory holds; a folder of that name is loaded as a path
    ("./distillmos"). The result's `source` and repr, and an INFO log line, say which was loaded.

    The result's `.score` scores paths, numpy arrays or torch tensors (`.score(audio, sample_rate)`)
    and lists of them, in input order; see `sqa.scoring.scorer.Scorer` for `domain`,
    `chunk_seconds`, `max_samples` (None: the default limit, `sqa.data.audio.MAX_AUDIO_SAMPLES`),
    `pooling` and `vocal_only` (trim each clip to its singing; None for a clip without any; the
    default follows the export's training). An
    export is read as data only: a hostile one raises `sqa.exports.format.ExportError` before
    anything is built.
    """
    from sqa.data.audio import MAX_AUDIO_SAMPLES
    from sqa.scoring.scorer import Scorer

    limit = MAX_AUDIO_SAMPLES if max_samples is None else max_samples
    return Scorer(
        path,
        device=device,
        batch_size=batch_size,
        domain=domain,
        chunk_seconds=chunk_seconds,
        max_samples=limit,
        pooling=pooling,
        vocal_only=vocal_only,
    )


def __getattr__(name: str) -> Any:
    # Lazy, so that `import sqa` (and `sqa-score --help`) does not import torch.
    if name == "Scorer":
        from sqa.scoring.scorer import Scorer

        return Scorer
    if name == "ExportError":
        from sqa.exports.format import ExportError

        return ExportError
    raise AttributeError(f"module 'sqa' has no attribute {name!r}")
