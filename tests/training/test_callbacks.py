"""sqa's own callbacks: the model summary without an uncounted FLOPs total."""

from __future__ import annotations

import logging

import lightning as L
import torch

from sqa.training.callbacks import ParameterSummary, frozen_note, summary_table

COLUMNS = [
    (" ", ["0", "1"]),
    ("Name", ["backbone", "head"]),
    ("Type", ["LogMelBackbone", "Linear"]),
    ("Params", ["200 K", "1.5 K"]),
    ("Mode", ["train", "train"]),
    ("FLOPs", ["0", "0"]),
]


def test_the_summary_leaves_out_flops_that_were_not_counted_and_keeps_them_where_they_were():
    table = summary_table(COLUMNS, trainable=201_500, total=251_500, size_mb=1.006)
    lines = table.splitlines()
    assert lines[0].split(" | ") == [" ", "Name    ", "Type          ", "Params", "Mode "]
    assert lines[2].split(" | ") == ["0", "backbone", "LogMelBackbone", "200 K ", "train"]
    assert lines[1] == lines[4] == "-" * (1 + 8 + 14 + 6 + 5 + 3 * 5)
    assert lines[5:] == [
        "201 K     Trainable params",
        "50.0 K    Non-trainable params",
        "251 K     Total params",
        "1.006     Total estimated model params size (MB)",
    ]
    assert "FLOPs" not in table
    counted = summary_table(COLUMNS, trainable=201_500, total=251_500, size_mb=1.006, flops=2_600_000)
    assert counted.splitlines()[0].endswith(" | FLOPs") and counted.endswith("2.6 M     Total FLOPs")


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(4, 1)


def test_fitting_logs_the_parameter_summary_without_a_flops_total(caplog):
    with caplog.at_level(logging.INFO, logger="sqa.training.callbacks"):
        ParameterSummary().on_fit_start(L.Trainer(logger=False, enable_checkpointing=False), Tiny())
    (record,) = [r for r in caplog.records if r.name == "sqa.training.callbacks"]
    text = record.getMessage()
    assert text.startswith("Model summary:") and "5         Total params" in text
    assert "FLOPs" not in text and "Flops" not in text


class Frozen(L.LightningModule):
    """A module whose 10-weight backbone is frozen for `steps` steps beside a 3-weight head."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.predictor = torch.nn.Module()
        self.predictor.backbone = torch.nn.Linear(3, 2, bias=False)
        self.predictor.backbone.extra = torch.nn.Linear(2, 2)  # with the first: 3 x 2 + 2 x 2 + 2 = 12
        self.head = torch.nn.Linear(2, 1)
        self.freeze_backbone_steps = steps


def test_a_frozen_backbone_is_said_beside_the_trainable_count():
    assert frozen_note(Frozen(400), 400) == (
        "Of the trainable params, the backbone's 12 are frozen for the whole run (400 steps); "
        "3 (head and branches) train from the first step"
    )
    assert frozen_note(Frozen(400), 1000).startswith(
        "Of the trainable params, the backbone's 12 are frozen for the first 400 steps, then trained"
    )
    assert frozen_note(Frozen(400), -1).endswith(
        "frozen for the first 400 steps, then trained; 3 (head and branches) train from the first step"
    )
    assert frozen_note(Frozen(0), 400) is None
