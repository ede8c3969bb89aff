"""The layer and parameter summary table that `ParameterSummary` logs, in Lightning's layout."""

from __future__ import annotations

from collections.abc import Sequence

from lightning.pytorch.utilities.model_summary import get_formatted_model_size, get_human_readable_count


def summary_table(
    columns: Sequence[tuple[str, Sequence[str]]],
    trainable: int,
    total: int,
    size_mb: float,
    flops: int = 0,
) -> str:
    """Lightning's summary layout: a row per layer of `columns` (name, values), then the counts.

    The FLOPs column and total are left out unless FLOPs were counted (`flops` > 0).
    """
    if not flops:
        columns = [(name, values) for name, values in columns if name != "FLOPs"]
    widths = [max([len(name), *(len(str(v)) for v in values)]) for name, values in columns]
    rule = "-" * (sum(widths) + 3 * len(columns))
    lines = [" | ".join(f"{name:<{w}}" for (name, _), w in zip(columns, widths, strict=True)), rule]
    for row in zip(*(values for _, values in columns), strict=True):
        lines.append(" | ".join(f"{str(v):<{w}}" for v, w in zip(row, widths, strict=True)))
    lines.append(rule)
    totals = [
        (get_human_readable_count(trainable), "Trainable params"),
        (get_human_readable_count(total - trainable), "Non-trainable params"),
        (get_human_readable_count(total), "Total params"),
        (get_formatted_model_size(size_mb), "Total estimated model params size (MB)"),
    ]
    if flops:
        totals.append((get_human_readable_count(flops), "Total FLOPs"))
    return "\n".join([*lines, *(f"{value:<10}{what}" for value, what in totals)])
