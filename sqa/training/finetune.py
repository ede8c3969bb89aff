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


class Anchor(torch.nn.Module):
    """L2-SP: `weight` · Σ‖θ − θ₀‖² over pretrained parameters θ, θ₀ their values when it is made.

    Training a pretrained network on a few dozen clips of one corpus forgets what it knew of
    others (docs/results.md#across-corpora); the penalty pulls its weights back toward where they
    started (Li et al., 2018, "Explicit inductive bias for transfer learning with convolutional
    networks"). θ₀ are buffers of the training module, so a checkpoint keeps them and a resumed
    run pulls toward the same point; an export holds the predictor alone, without them.
    """

    def __init__(self, parameters: Iterable[torch.nn.Parameter], weight: float) -> None:
        super().__init__()
        if not (weight >= 0 and weight < float("inf")):
            raise ValueError(f"finetune.anchor must be a finite number, 0 or more, got {weight}")
        self.weight = float(weight)
        # A plain list, not registered: the parameters belong to the predictor.
        self.anchored = list(parameters)
        for number, parameter in enumerate(self.anchored):
            self.register_buffer(f"start{number}", parameter.detach().clone())

    def forward(self) -> torch.Tensor:
        """The penalty, a scalar (0 without anchored parameters).

        A parameter frozen at this step (a backbone in its `freeze_backbone_steps`) still holds its
        start and adds 0: it is skipped, so a frozen pretrained network costs no work per step.
        """
        total = sum(
            ((p - getattr(self, f"start{n}").to(p)) ** 2).sum()
            for n, p in enumerate(self.anchored)
            if p.requires_grad
        )
        return self.weight * torch.as_tensor(total)


def pretrained_parameters(predictor: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters of `predictor` that start from pretrained weights and may learn.

    The backbone's, and those a family declares (`pretrained_head_parameters`, e.g. the calibrated
    family's pretrained head); a head trained from scratch has no pretrained point to keep.
    """
    own = getattr(predictor, "pretrained_head_parameters", None)
    head = list(own()) if callable(own) else []
    return [p for p in (*predictor.backbone.parameters(), *head) if p.requires_grad]
