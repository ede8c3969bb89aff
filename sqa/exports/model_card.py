"""The model card (README.md) of an export: data, test metrics, configuration, software, use, citation.

Rendered from what the export and its run recorded (config.yaml's model, metrics.json, the run's
run_info.json and training configuration); a section whose source is missing says so. An export
of a released predictor (`sqa-import`, whose run_info.json holds a `release` record) is named
after that release, with what it was trained on as far as known and its authors. An ensemble
(`sqa-ensemble`, whose run_info.json holds an `ensemble` record) lists its members and weights.
The sections drawn from the run's records are built in `sqa.exports.card_sections`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from sqa.exports.card_sections import (
    LEVEL_NAMES,
    TRAINING_KEYS,
    _backbone_name,
    _domain_note,
    _predictors,
    _scale_note,
    candidates_section,
    checkpoint_section,
    members_section,
    metrics_table,
    training_settings,
)
from sqa.reports import learning

# This module's names, and the sections that moved out of it (card_sections), importable here as before.
__all__ = [
    "LEVEL_NAMES",
    "POOLING_TEXT",
    "RELEASES",
    "SYNTHETIC_READER",
    "SYNTHETIC_READERS",
    "TRAINING_KEYS",
    "Release",
    "checkpoint_section",
    "members_section",
    "metrics_table",
    "render",
    "source_section",
    "training_settings",
]

SYNTHETIC_READER = "sqa.data.synthetic.load_synthetic"
# The built-in synthetic corpora: its SingMOS-Pro layout and its MUSHRA-style ratings.
SYNTHETIC_READERS = frozenset({SYNTHETIC_READER, "sqa.data.synthetic.load_synthetic_mushra"})
# What each `pooling` of the predictor does, in the card's words.
POOLING_TEXT = {
    "masked_mean": "the mean of the clip's own frame scores (sqa's default)",
    "s3prl_padded_mean": (
        "the mean over s3prl's ceil(N/320) output frames, the last real frame repeated, as the"
        " SingMOS and SHEET predictors compute it (`sqa-score --pooling masked_mean` averages the"
        " clip's own frames instead)"
    ),
}


@dataclass(frozen=True)
class Release:
    """What a card says of a released predictor: its name, training data, authors and paper."""

    name: str
    trained_on: str
    authors: str
    cite: str
    source: str


# The releases `sqa-import` converts, by kind. What each was trained on is said only as far as
# its authors' papers and code say it; the rest is left to the release.
RELEASES = {
    "singmos_pro": Release(
        "SingMOS-Pro",
        "SingMOS-Pro's overall MOS (singing voice synthesis, conversion and resynthesis), with its"
        " annotation batches as domain IDs; for the exact recipe, see the release",
        "Yuxun Tang, Lan Liu, Wenhao Feng, Yiwen Zhao, Jionghao Han, Yifeng Yu, Jiatong Shi and Qin Jin",
        "SingMOS-Pro: An Comprehensive Benchmark for Singing Quality Assessment (arXiv:2510.01812)",
        "the `singmos_pro` torch.hub entry of South-Twilight/SingMOS",
    ),
    "singmos_v1": Release(
        "SingMOS v1",
        "SingMOS, the singing track of the VoiceMOS Challenge 2024 (singing voice synthesis and"
        " conversion); for the exact recipe, see the release",
        "Yuxun Tang et al.",
        "SingMOS: An extensive Open-Source Singing Voice Dataset for MOS Prediction (arXiv:2406.10911)",
        "the `singmos_v1` torch.hub entry of South-Twilight/SingMOS",
    ),
    "sheet": Release(
        "SHEET SSL-MOS",
        "the MOS corpora its release names: SHEET's released predictors are trained on speech, some"
        " with SingMOS singing added, so singing may lie outside what it was trained and tested on;"
        " see the release",
        "Wen-Chin Huang et al.",
        "SHEET (unilight/sheet), as its release asks",
        "unilight/sheet",
    ),
}


def source_section(release: Mapping[str, Any], known: Release) -> list[str]:
    """Where an imported export's weights came from: the release, its files and the converter."""
    files = ", ".join(f"`{release[key]}`" for key in ("weights", "config") if release.get(key))
    return [
        "## Source",
        "",
        f"- released weights: {files}, from {known.source}",
        f"- converted by `sqa-import {release['kind']}` of sqa {release.get('sqa', '?')}; the wav2vec2"
        f" architecture from s3prl's `{release.get('upstream', '?')}`",
        "- nothing was trained or selected by sqa: the weights are the release's",
    ]


def _yaml_block(value: Any) -> list[str]:
    return ["```yaml", OmegaConf.to_yaml(OmegaConf.create(value)).rstrip(), "```"]


def render(
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    dimension_metrics: Mapping[str, Mapping[str, Any]] | None = None,
    run_info: Mapping[str, Any] | None = None,
    training: Mapping[str, Any] | None = None,
) -> str:
    """The card's Markdown from an export's `config` (config.yaml), its metrics and its run's records."""
    model = config["model"]
    predictors = _predictors(model)
    backbone = ", ".join(dict.fromkeys(_backbone_name(p) for p in predictors))
    ensemble = (run_info or {}).get("ensemble")
    corpus = dict((run_info or {}).get("corpus") or {})
    reader = corpus.get("reader", "an unrecorded corpus")
    low, high = corpus.get("score_range", (1, 5))
    dimensions = list(predictors[0].get("dimensions") or ["mos"])
    poolings = list(dict.fromkeys(str(p.get("pooling", "masked_mean")) for p in predictors))
    version = (run_info or {}).get("sqa")
    check = (run_info or {}).get("learning_check")
    release = dict((run_info or {}).get("release") or {})
    known = RELEASES.get(release.get("kind", ""))
    # A model that does not beat the constant training mean says so before anything else.
    warning = (
        [f"**Warning:** {learning.sentence(check)}", ""] if check and check["verdict"] != "better" else []
    )
    if known is not None:
        # Named after its release: "for singing" would misname a predictor trained on speech.
        title = f"# {known.name} predictor (s3prl `{release.get('upstream', '?')}`), imported into sqa"
        about = f"The {known.name} predictor of the mean opinion score (MOS) by {known.authors},"
        about += " converted into an sqa export by `sqa-import`"
    elif "members" in model:
        title = f"# MOS predictor for singing: an ensemble of {len(predictors)} ({backbone})"
        title += f", built with sqa {version}" if version else ""
        about = "An ensemble of sqa predictors of the mean opinion score (MOS) of singing clips"
    else:
        title = f"# MOS predictor for singing: {backbone}" + (
            f", trained with sqa {version}" if version else ""
        )
        about = "An exported sqa predictor of the mean opinion score (MOS) of singing clips"
    lines = [
        *warning,
        title,
        "",
        f"{about}, on the {low:g}–{high:g} scale of its training ratings."
        f" Score dimensions: {', '.join(dimensions)}.",
        *_scale_note(predictors[0]),
        "",
        ("Each member's" if "members" in model else "A clip's")
        + " score pools its frame scores by "
        + "; ".join(f"`{p}`: {POOLING_TEXT.get(p, p)}" for p in poolings)
        + ".",
        "",
        "```sh",
        "sqa-score --checkpoint <this folder> --output scores.csv clip.wav more/clips/",
        "```",
        "",
        'In Python (`audio`: a file\'s path, scored as `model.score("clip.wav")`, or a float numpy array'
        " or torch tensor, `(samples,)` or `(samples, channels)` for one clip, at any `sample_rate`;"
        " a `(clips, samples)` batch or a list of them gives a list in order"
        + ("; `score` is a dict by score dimension" if len(dimensions) > 1 else "")
        + "):",
        "",
        "```python",
        "import sqa",
        'model = sqa.load("<this folder>")',
        "score = model.score(audio, sample_rate)",
        "```",
        *_domain_note(config),
        "",
        "## Intended use",
        "",
        "Automatic quality estimates for singing voice synthesis and conversion research: ranking systems,"
        " tracking training runs, screening outputs. It does not replace a listening test: system-level"
        " rankings are more reliable than single-clip scores (see the intervals below), and scores reflect"
        " the listeners and systems of the training corpus. Audio unlike that corpus"
        + ("" if known else " (speech, instruments, other recording conditions)")
        + " is outside what the test results cover.",
    ]
    if reader in SYNTHETIC_READERS:
        lines += [
            "",
            "**Trained on sqa's built-in synthetic corpus**: a demonstration model whose scores follow"
            " synthetic degradations and simulated raters, not human judgements.",
        ]
    lines += ["", "## Data", ""]
    if known is not None:
        lines.append(f"- trained by its authors on {known.trained_on}")
    elif corpus:
        lines.append(f"- corpus reader: `{reader}`; fingerprint `{corpus.get('fingerprint', '?')}`")
        for split, count in (corpus.get("clips") or {}).items():
            lines.append(f"- {split}: {count} clips")
        if corpus.get("systems") is not None:
            lines.append(f"- systems: {corpus['systems']}")
    else:
        lines.append("Not recorded (this export was not written by a training run).")
    lines += [f"- sample rate of the model: {config.get('sample_rate')} Hz", ""]
    if check:
        lines += ["## Against the constant predictor", "", learning.sentence(check), ""]
    if known:
        source = source_section(release, known)
    elif ensemble:
        source = members_section(ensemble, model)
    else:
        source = checkpoint_section(run_info)
    lines += [*source, ""]
    candidates = candidates_section((run_info or {}).get("candidates"))
    lines += [*candidates, ""] if candidates else []
    lines += ["## Test results", ""]
    if known is not None and not metrics:
        lines.append("None recorded by sqa; for its authors' results, see the release.")
    else:
        lines += metrics_table(metrics)
    for dim, dim_metrics in (dimension_metrics or {}).items():
        lines += ["", f"### {dim} (clips with a {dim} score)", ""]
        lines += metrics_table(dim_metrics)
    lines += ["", "## Configuration", "", "Model (the architecture in config.yaml):", ""]
    lines += _yaml_block(model)
    if config.get("f0"):
        lines += ["", "Pitch (f0) extraction:", ""]
        lines += _yaml_block(config["f0"])
    if training:
        lines += ["", "Training:", ""]
        lines += _yaml_block(training_settings(training))
    lines += ["", "## Software", ""]
    if known is not None:
        lines.append(
            f"- sqa {release.get('sqa', '?')} converted it; the import's record: run_info.json in this folder"
        )
    elif run_info:
        lines.append(
            f"- sqa {run_info.get('sqa')}, Python {run_info.get('python')} on {run_info.get('platform')}"
        )
        packages = run_info.get("packages") or {}
        installed = [f"{name} {version}" for name, version in packages.items() if version]
        if installed:
            lines.append(f"- {', '.join(installed)}")
        lines.append("- the training run's records: run_info.json in this folder")
    else:
        lines.append("Not recorded (this export was not written by a training run).")
    lines += ["", "## Citation", ""]
    if known is not None:
        lines.append(
            f"If you use this model, cite its authors ({known.authors}): {known.cite}; and sqa"
            " (CITATION.cff in the sqa repository), which converted it."
        )
    else:
        lines.append(
            "If you use this model, cite sqa (CITATION.cff in the sqa repository) and the corpus it was"
            " trained on; for SingMOS-Pro data, the SingMOS-Pro paper."
        )
    lines.append("")
    return "\n".join(lines)
