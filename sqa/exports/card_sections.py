"""The model card's sections drawn from an export's records: test metrics, training, scale, domains, members.

Each returns Markdown lines for `sqa.exports.model_card.render`; a section whose source is
missing says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqa.metrics import AVERAGE_KEY, CI_KEY, UNDEFINED_KEY
from sqa.reports.tables import interval_note, metric_cell, table_keys

LEVEL_NAMES = {"utt": "utterance", "sys": "system"}
# Training settings a reader of the card needs; paths (corpus root, pretrained weights) stay out.
TRAINING_KEYS = {
    "seed": None,
    "loss": None,
    "optim": None,
    "early_stopping_patience": None,
    "data": (
        "sample_rate",
        "batch_size",
        "max_train_seconds",
        "train_domains",
        "bucketing",
        "max_batch_seconds",
    ),
    "trainer": (
        "max_epochs",
        "max_steps",
        "val_check_interval",
        "precision",
        "gradient_clip_val",
        "accumulate_grad_batches",
    ),
}


def metrics_table(results: Mapping[str, Any]) -> list[str]:
    """Markdown table rows: one per test set (average last) and level, one column per metric."""
    blocks = {k: v for k, v in results.items() if isinstance(v, Mapping) and "utt" in v}
    if not blocks:
        return ["No test metrics were recorded."]
    names = [
        k
        for k, v in next(iter(blocks.values()))["utt"].items()
        if k != "n" and not isinstance(v, (str, Mapping))
    ]
    # The average last, and only where it averages several sets (one rule with every table).
    order = table_keys(blocks)
    lines = [
        "| test set | level | n | " + " | ".join(n.upper() for n in names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for name in order:
        # Metrics handed to `export_predictor` may hold one level only (clips without systems).
        for level in [level for level in ("utt", "sys") if level in blocks[name]]:
            cells = [metric_cell(blocks[name], level, metric, interval_digits=3) for metric in names]
            label = "average" if name == AVERAGE_KEY else name
            lines.append(
                f"| {label} | {LEVEL_NAMES[level]} | {blocks[name][level].get('n', '')} | "
                + " | ".join(cells)
                + " |"
            )
    reasons = [
        f"- {'average' if name == AVERAGE_KEY else name}, {LEVEL_NAMES[level]} {metric.upper()}: {why}"
        for name in order
        for level, why_by_metric in blocks[name].get(UNDEFINED_KEY, {}).items()
        for metric, why in why_by_metric.items()
    ]
    if reasons:
        lines += ["", "n/a: undefined for that set:", *reasons]
    if any(CI_KEY in b for b in blocks.values()):
        lines.append("")
        lines.append(interval_note())
    return lines


def training_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of a resolved training configuration that the card shows (`TRAINING_KEYS`)."""
    out: dict[str, Any] = {}
    for key, fields in TRAINING_KEYS.items():
        if key not in config:
            continue
        value = config[key]
        if fields is not None and isinstance(value, Mapping):
            value = {f: value[f] for f in fields if f in value}
        out[key] = value
    return out


def _scale_note(model: Mapping[str, Any]) -> list[str]:
    """A sentence on the scale map for a model trained on a scale other than 1-5 (none on 1-5)."""
    low, high = model.get("score_range") or (1.0, 5.0)
    if (low, high) == (1.0, 5.0):
        return []
    return [
        "",
        f"Its head predicts on 1–5 inside (the `range_clip` below is of that scale); every score it"
        f" gives is mapped linearly onto {low:g}–{high:g} (`score_range`), as the metrics below are.",
    ]


def _domain_note(config: Mapping[str, Any]) -> list[str]:
    """For a model with domain embeddings, the domains it scores as (none for one without)."""
    if not any(model.get("domain_dim") for model in _predictors(config["model"])):
        return []
    domains = [str(d) for d in config.get("domains") or []]
    return [
        "",
        "It scores every clip as coming from one of the domains (annotation batches) it was trained"
        f" on: {', '.join(f'`{d}`' for d in domains)}; the first unless `--domain` (or"
        " `sqa.load(..., domain=...)`) names another, and `sqa-score` says so in one line when none"
        ' is named. `--domain mean` (`domain="mean"`) scores a clip as the mean of its scores as'
        " every domain.",
    ]


def _predictors(model: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The predictor configs of a `model` node: an ensemble's members, else the node itself."""
    return list(model.get("members") or [model])


def _backbone_name(model: Mapping[str, Any]) -> str:
    """The class name of a predictor config's backbone ('?' if none; a fusion's with its parts)."""
    node = model.get("backbone", {})
    name = str(node.get("_target_", "?")).rsplit(".", 1)[-1]
    parts = [node[p] for p in ("first", "second") if isinstance(node.get(p), Mapping)]
    if parts:
        inner = " + ".join(str(p.get("_target_", "?")).rsplit(".", 1)[-1] for p in parts)
        name = f"{name} ({inner})"
    return name


def members_section(ensemble: Mapping[str, Any], model: Mapping[str, Any]) -> list[str]:
    """An ensemble's members: where each came from, its backbone, seed, weight and own test SRCC."""
    method = ensemble.get("method", "?")
    if method == "ridge":
        how = (
            f"weights and intercept fitted by ridge regression (alpha {ensemble.get('alpha')}, on the 1–5"
            f" scale) on the members' predictions of {ensemble.get('validation_clips')} validation clips"
        )
    else:
        how = "the mean of the members' scores"
    intercept = model.get("intercept") or [0.0]
    lines = [
        "## Members",
        "",
        f"Its score is {how}: intercept {intercept[0]:.4g} + the weighted sum of the members' overall"
        " scores on the 1–5 scale (config.yaml's `model.weights` holds every dimension's).",
        "",
        "| member | backbone | seed | weight | its own test utterance SRCC | system SRCC |",
        "|---|---|---|---|---|---|",
    ]
    weights = (model.get("weights") or [[]])[0]
    for i, member in enumerate(ensemble.get("members") or []):
        weight = f"{weights[i]:.4g}" if i < len(weights) else "?"
        cells = [member.get(key) for key in ("utt_srcc", "sys_srcc")]
        srcc = ["n/a" if value is None else f"{value:.3f}" for value in cells]
        seed = member.get("seed")
        lines.append(
            f"| `{member.get('name', i)}` | {member.get('backbone', '?')} | {'?' if seed is None else seed} |"
            f" {weight} | {srcc[0]} | {srcc[1]} |"
        )
    lines += ["", "Each member's weights are stored inside this export (model.pt, `members.<i>.`)."]
    return lines


def checkpoint_section(run_info: Mapping[str, Any] | None) -> list[str]:
    """The selected checkpoint (its step and the rule that chose it) and why training stopped."""
    lines = ["## Selected checkpoint", ""]
    if not run_info:
        return [*lines, "Not recorded (this export was not written by a training run)."]
    selection = run_info.get("selection") or {}
    step, best = selection.get("selected_step"), selection.get("best_checkpoint")
    where = f"step {step}" if step is not None else "an unrecorded step"
    where += f" (`{best}`)" if best else ""
    how = f", the best {selection['rule']}" if selection.get("rule") else ""
    checks = f" of {selection['checks']} validation checks" if selection.get("checks") else ""
    lines.append(f"- exported weights: {where}{how}{checks}")
    end = run_info.get("training_end")
    if end:
        lines.append(f"- training stopped at step {end['step']}: {end['reason']}")
    else:
        lines.append("- why training stopped: not recorded (a run from before sqa recorded it)")
    return lines


def candidates_section(candidates: Mapping[str, Any] | None) -> list[str]:
    """The candidates the run compared: each one's validation score (interval), test metrics and seconds."""
    if not candidates:
        return []
    lines = [
        "## Candidates",
        "",
        f"The run trained these models on the same splits and kept `{candidates.get('winner')}`, the best"
        f" on {candidates.get('compared_on')} (a later candidate must be better by more than the tie"
        " tolerance).",
        "",
        "| candidate | validation | 95 % interval | test utt RMSE | test utt SRCC | test sys SRCC"
        " | seconds |",
        "|---|---|---|---|---|---|---|",
    ]

    def shown(value: Any) -> str:
        return "n/a" if value is None else f"{value:.4g}"

    for entry in candidates.get("entries") or []:
        valid, test = entry.get("valid") or {}, entry.get("test") or {}
        ci = valid.get("ci")
        lines.append(
            f"| `{entry.get('name')}` | {shown(valid.get('value'))} |"
            f" {f'[{ci[0]:.4g}, {ci[1]:.4g}]' if ci else 'n/a'} |"
            f" {shown((test.get('utt') or {}).get('rmse'))} | {shown((test.get('utt') or {}).get('srcc'))} |"
            f" {shown((test.get('sys') or {}).get('srcc'))} | {shown(entry.get('seconds'))} |"
        )
    for name, reason in (candidates.get("skipped") or {}).items():
        lines.append(f"| `{name}` | skipped: {reason} | | | | | |")
    return lines + cross_validation_lines(candidates.get("cross_validation"))


def cross_validation_lines(cv: Mapping[str, Any] | None) -> list[str]:
    """The cross-validation that chose among the candidates: why, and each one's fold values and mean."""
    if not cv:
        return []

    def shown(value: Any) -> str:
        return "n/a" if value is None else f"{value:.4g}"

    lines = [
        "",
        f"Chosen by {cv.get('compared_on')}, because {cv.get('why')}; held out in turn: "
        + "; ".join(", ".join(f"`{g}`" for g in fold) for fold in cv.get("groups") or [])
        + ".",
        "",
        "| candidate | fold values | mean | 95 % interval | seconds on folds 1 and on |",
        "|---|---|---|---|---|",
    ]
    for entry in cv.get("entries") or []:
        ci = entry.get("ci")
        lines.append(
            f"| `{entry.get('name')}` | {', '.join(shown(v) for v in entry.get('folds') or [])} |"
            f" {shown(entry.get('value'))} | {f'[{ci[0]:.4g}, {ci[1]:.4g}]' if ci else 'n/a'} |"
            f" {shown(entry.get('seconds'))} |"
        )
    frozen = cv.get("frozen_phase_only") or []
    if frozen:
        lines.append("")
        lines.append(
            f"{', '.join(f'`{n}`' for n in frozen)}: cross-validated by the frozen phase; whether its"
            " fine-tuning helps was judged by the final training's validation."
        )
    return lines
