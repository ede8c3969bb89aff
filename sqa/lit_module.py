"""MOSModule: the Lightning training, validation and test loop around a MOSPredictor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch
import torch.distributed as dist

from sqa import metrics
from sqa.models.predictor import MOSPredictor, Prediction

LossFn = Callable[[Prediction, torch.Tensor], torch.Tensor]
OptimizerFactory = Callable[..., torch.optim.Optimizer]


class MOSModule(L.LightningModule):
    """Trains a predictor with a configurable loss and optimizer; scores every eval set.

    Validation logs `val/selection`: system-level SRCC averaged over the validation sets weighted
    by their system counts, the quantity checkpoints are selected on. Test results (per set and
    averaged) are kept in `test_results` and per-clip predictions in `test_predictions`.
    """

    def __init__(
        self,
        predictor: MOSPredictor,
        loss: LossFn,
        optimizer: OptimizerFactory,
        valid_names: Sequence[str] = (),
        test_names: Sequence[str] = (),
        seed: int = 0,
        bootstrap: int = 1000,
    ) -> None:
        super().__init__()
        self.seed = seed
        self.bootstrap = bootstrap
        self.predictor = predictor
        self.loss = loss
        self.optimizer_factory = optimizer
        self.valid_names = list(valid_names)
        self.test_names = list(test_names)
        self._outputs: dict[int, list[dict[str, Any]]] = {}
        self.test_results: dict = {}
        self.test_predictions: list[dict[str, Any]] = []

    def forward(self, batch: dict[str, Any]) -> Prediction:
        """Score a collated batch (wav (B, N), lengths (B,), domain (B,), f0 (B, T') or None)."""
        return self.predictor(batch["wav"], batch["lengths"], batch["domain"], batch.get("f0"))

    def on_train_batch_start(self, batch: dict[str, Any], batch_idx: int) -> None:
        """Seed torch's RNG (dropout) from (seed, step): a resumed run replays every step exactly.

        Per step rather than per epoch, because creating data loader iterators also draws from
        torch's RNG, and a resumed run creates them at other moments than an uninterrupted one.
        DDP ranks draw distinct masks.
        """
        torch.manual_seed(self.seed * 1_000_003 + self.global_step + 1_000_000_007 * self.global_rank)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """One optimisation step on a padded batch."""
        out = self(batch)
        loss = self.loss(out, batch["mos"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["mos"]))
        return loss

    def _collect(self, batch: dict[str, Any], dataloader_idx: int) -> None:
        score = self(batch).score.float().cpu()
        rows = self._outputs.setdefault(dataloader_idx, [])
        for i, sample_id in enumerate(batch["sample_id"]):
            rows.append(
                {
                    "index": int(batch["index"][i]),
                    "sample_id": sample_id,
                    "system_id": batch["system_id"][i],
                    "mos": float(batch["mos"][i]),
                    "pred": float(score[i]),
                }
            )

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Collect predictions of one validation batch."""
        self._collect(batch, dataloader_idx)

    def test_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Collect predictions of one test batch."""
        self._collect(batch, dataloader_idx)

    def _gathered(self) -> dict[int, list[dict[str, Any]]]:
        """Every rank's collected rows per loader, in dataset order; resets the collection.

        Under DDP each rank scored a share of the batches; system-level metrics need all of them,
        so the rows are gathered (batches repeated to even out the ranks count once) and every
        rank computes the same metrics as one process would.
        """
        outputs, self._outputs = self._outputs, {}
        if self.trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            parts: list[Any] = [None] * self.trainer.world_size
            dist.all_gather_object(parts, outputs)
            outputs = {}
            for part in parts:
                for idx, rows in part.items():
                    outputs.setdefault(idx, []).extend(rows)
        merged = {}
        for idx, rows in sorted(outputs.items()):
            by_index = {r["index"]: r for r in rows}
            merged[idx] = [by_index[i] for i in sorted(by_index)]
        return merged

    def _blocks(self, names: Sequence[str]) -> dict[str, dict]:
        blocks = {}
        for idx, rows in self._gathered().items():
            name = names[idx] if idx < len(names) else str(idx)
            blocks[name] = metrics.evaluate(
                [r["pred"] for r in rows], [r["mos"] for r in rows], [r["system_id"] for r in rows]
            )
        return blocks

    def on_validation_epoch_start(self) -> None:
        """Start a fresh collection for this validation run."""
        self._outputs = {}

    def on_validation_epoch_end(self) -> None:
        """Log per-set system SRCC / utterance RMSE and the selection score."""
        blocks = self._blocks(self.valid_names)
        if not blocks:
            return
        # Metrics are computed from the gathered rows, so every rank logs the same values; the
        # (no-op) sync_dist averaging is what Lightning expects of epoch-level values under DDP.
        for name, block in blocks.items():
            self.log(f"val/{name}/sys_srcc", block["sys"]["srcc"], add_dataloader_idx=False, sync_dist=True)
            self.log(f"val/{name}/utt_rmse", block["utt"]["rmse"], add_dataloader_idx=False, sync_dist=True)
        self.log(
            "val/selection",
            metrics.selection_score(blocks),
            prog_bar=True,
            add_dataloader_idx=False,
            sync_dist=True,
        )

    def on_test_epoch_start(self) -> None:
        """Start a fresh collection for this test run."""
        self._outputs = {}

    def on_test_epoch_end(self) -> None:
        """Compute metrics per test set and their weighted average, with bootstrap intervals."""
        rows = []
        for idx, batch_rows in self._gathered().items():
            name = self.test_names[idx] if idx < len(self.test_names) else str(idx)
            rows.extend({**r, "test_set": name} for r in batch_rows)
        self.test_predictions = rows
        self.test_results = metrics.evaluate_sets(
            [r["pred"] for r in rows],
            [r["mos"] for r in rows],
            [r["system_id"] for r in rows],
            [r["test_set"] for r in rows],
            bootstrap=self.bootstrap,
            seed=self.seed,
        )
        for name, block in self.test_results.items():
            for level in ("utt", "sys"):
                for key in metrics.METRIC_NAMES:
                    value = block[level][key]
                    self.log(f"test/{name}/{level}_{key}", value, add_dataloader_idx=False, sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """The configured optimizer over all trainable parameters."""
        return self.optimizer_factory(p for p in self.parameters() if p.requires_grad)
