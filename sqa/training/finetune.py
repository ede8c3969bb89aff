"""Fine-tuning a pretrained backbone: its own optimizer group, frozen for the first steps, then scaled."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


def backbone_optimizer(
    factory: Callable[..., torch.optim.Optimizer],
    parameters: Iterable[torch.nn.Parameter],
    backbone: list[torch.nn.Parameter],
    lr_scale: float,
    frozen_steps: int,
) -> dict[str, Any]:
    """`factory`'s optimizer over `parameters` with the `backbone`'s in a group of their own.

    The backbone's group learns at `lr_scale` times the rate, and at 0 for the first
    `frozen_steps` steps; Lightning's optimizer config (optimizer and per-step schedule).
    """
    ids = {id(p) for p in backbone}
    rest = [p for p in parameters if p.requires_grad and id(p) not in ids]
    optimizer = factory([{"params": rest}, {"params": backbone}])
    optimizer.param_groups[1]["lr"] = optimizer.defaults["lr"] * lr_scale
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, [lambda step: 1.0, lambda step: 0.0 if step < frozen_steps else 1.0]
    )
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
