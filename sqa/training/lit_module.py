"""MOSModule: the Lightning training, validation and test loop around a MOSPredictor."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch

from sqa import metrics
from sqa.core.prediction import OVERALL, Prediction
from sqa.data.corpus import ROLES
from sqa.models.predictor import MOSPredictor
from sqa.training.finetune import Anchor, backbone_optimizer, pretrained_parameters
from sqa.training.frame_cache import FrameCache, FrameSource, FrameStore
from sqa.training.losses import NLL_LOSSES
from sqa.training.prediction_rows import clip_rows, gathered_rows, labelled
from sqa.training.selection import TIEBREAK_KEY, SelectionRule

# `labelled` moved to sqa.training.prediction_rows and stays importable here.
__all__ = ["LossFn", "MOSModule", "OptimizerFactory", "labelled"]

LossFn = Callable[..., torch.Tensor]
OptimizerFactory = Callable[..., torch.optim.Optimizer]


class MOSModule(FrameSource, L.LightningModule):
    """Trains a predictor with a configurable loss and optimizer; scores every eval set.

    The loss compares the predictor's internal 1-5 scores with the labels mapped onto that scale
    (`MOSPredictor.to_internal`); predictions and metrics are on the corpus's own scale.
    Validation logs `val/loss` and `val/selection`, the score of the `selection` rule
    (default: system-level SRCC of the overall MOS averaged over the validation sets weighted by
    their system counts), the quantity checkpoints are selected on, and
    `val/selection_tiebreak`, the utterance RMSE over the rule's sets that orders tied scores.
    Fine-tuning a pretrained backbone: for the first `freeze_backbone_steps` steps only the
    head and branches learn (the backbone is in eval mode, its learning rate is 0, and in a
    single process its gradients are not computed and its frames of each clip are computed once,
    up to `frame_cache_mb` of them: `sqa.training.frame_cache`), then the backbone learns at
    `backbone_lr_scale` times the rate. A backbone whose front never learns (`keep_fronts`, e.g.
    Distill-MOS's CNN) keeps that front's output of each segment in a fit where it learns, up to
    `frame_cache_mb` more, so a fine-tuning step costs only the layers that learn. `anchor` > 0
    adds `anchor` · Σ‖θ − θ₀‖² over the pretrained parameters θ that learn, θ₀ their starting
    values (L2-SP: `sqa.training.finetune.Anchor`).
    Test results (per set and averaged) of the overall MOS are kept in `test_results`, those of
    the predictor's other score dimensions in `dimension_results` (each over the clips that have
    that label), and per-clip predictions in `test_predictions` (`mos`, `pred`, and
    `mos_<dim>`, `pred_<dim>` per other dimension, the label NaN where missing; `song` where the
    clip names one).
    """

    def __init__(
        self,
        predictor: MOSPredictor,
        loss: LossFn | None,
        optimizer: OptimizerFactory | None,
        valid_names: Sequence[str] = (),
        test_names: Sequence[str] = (),
        seed: int = 0,
        bootstrap: int = 1000,
        selection: SelectionRule | None = None,
        freeze_backbone_steps: int = 0,
        backbone_lr_scale: float = 1.0,
        frame_cache_mb: int = 1024,
        frame_store: FrameStore | None = None,
        anchor: float = 0.0,
    ) -> None:
        super().__init__()
        if freeze_backbone_steps < 0:
            raise ValueError(f"freeze_backbone_steps must be 0 or more, got {freeze_backbone_steps}")
        if not 0 < backbone_lr_scale <= 1:
            raise ValueError(f"backbone_lr_scale must be in (0, 1], got {backbone_lr_scale}")
        distribution = getattr(predictor, "distribution", None)
        if loss is not None and distribution is not None:
            # The loss's likelihood is what makes the spread a standard deviation or a Laplace scale.
            expected = NLL_LOSSES[distribution]
            if getattr(loss, "func", loss) is not expected:
                raise ValueError(
                    f"a predictor with a {distribution} spread trains with loss={expected.__name__}"
                )
        self.freeze_backbone_steps = int(freeze_backbone_steps)
        self.backbone_lr_scale = float(backbone_lr_scale)
        self._backbone_trainable: list[torch.nn.Parameter] = []
        # A fit of the frozen phase alone whose fine-tuning follows in a later fit of this module
        # (cross-validation's fold 0): its backbone keeps the fronts that fine-tuning reads.
        self.fine_tunes_later = False
        if frame_cache_mb < 0:
            raise ValueError(f"frame_cache_mb must be 0 or more, got {frame_cache_mb}")
        # An evaluation-only module (no optimizer) never changes its backbone: it may cache too.
        caching = freeze_backbone_steps or (frame_store is not None and optimizer is None)
        self._cache_bytes = frame_cache_mb << 20 if caching else 0
        self._front_bytes = frame_cache_mb << 20
        self.frame_store = frame_store
        self._member_caches: dict[int, FrameCache] = {}
        self._expected_clips: int | None = None
        # A shared cache is looked up by the backbone's weights at its first cached pass (after any
        # init_from or checkpoint restore), so it is found then.
        own = self._cache_bytes and frame_store is None
        self.frame_cache = FrameCache(self._cache_bytes) if own else None
        self.selection = selection or SelectionRule("srcc", "sys", tuple(valid_names), "sys srcc")
        # Sums and counts of the training loss since the last validation and of the validation
        # loss of the current one (losses are batch means: weighted by batch size).
        self._train_loss = [0.0, 0]
        self._val_loss = [0.0, 0]
        self.seed = seed
        self.bootstrap = bootstrap
        self.predictor = predictor
        # Made after any init_from or pretrained load (the builder's order): θ₀ is where training starts.
        self.anchor = Anchor(pretrained_parameters(predictor), anchor) if anchor else None
        self.loss = loss
        self.optimizer_factory = optimizer
        self.valid_names = list(valid_names)
        self.test_names = list(test_names)
        self._outputs: dict[int, list[dict[str, Any]]] = {}
        self.test_results: dict = {}
        self.dimension_results: dict[str, dict] = {}
        self.test_predictions: list[dict[str, Any]] = []
        # The last validation's prediction rows, by validation set.
        self.valid_rows: dict[str, list[dict[str, Any]]] = {}

    @property
    def extra_dimensions(self) -> list[str]:
        """The predictor's score dimensions after the overall MOS."""
        return self.predictor.dimensions[1:]

    def forward(self, batch: dict[str, Any]) -> Prediction:
        """Score a collated batch (wav (B, N), lengths (B,), domain (B,), f0 (B, T') or None).

        Judge IDs (B,) are used where the batch has them (training with judges); evaluation
        batches have none and are scored as the mean judge.
        """
        args = (batch["domain"], batch.get("f0"), batch.get("judge"))
        if self._cached():
            frames, frame_lengths = self.frame_cache.frames(
                self.predictor.backbone, batch["wav"], batch["lengths"]
            )
            return self.predictor.score_frames(frames, frame_lengths, batch["lengths"], *args)
        if self._members_cached():
            outs = [self._member_prediction(m, batch, args) for m in self.predictor.members]
            return self.predictor.combine(outs, batch["lengths"])
        return self.predictor(batch["wav"], batch["lengths"], *args)

    def on_fit_start(self) -> None:
        """Tell the frame cache how many clips it will hold; let a backbone that will learn keep fronts."""
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is not None and hasattr(datamodule, "corpus"):
            # A shared cache is found at its first pass (`_cached`), and told then.
            self._expected_clips = len(datamodule.corpus.clips)
        if self.frame_cache is not None:
            self.frame_cache.expected = self._expected_clips
        if self._backbone_will_learn() or self.fine_tunes_later:
            self.keep_fronts(self._front_bytes)

    def on_fit_end(self) -> None:
        """Free the backbone's kept fronts: testing and scoring pass each clip once.

        A module that fine-tunes in a later fit (`fine_tunes_later`) keeps them for it. A backbone
        that was frozen at the end learns again, as built: a later fit of the same module (a
        fine-tuning phase after the frozen one, sqa.training.crossval) finds its parameters.
        """
        if not self.fine_tunes_later:
            self.keep_fronts(0)
        for parameter in self._backbone_trainable:
            parameter.requires_grad_(True)

    def on_train_batch_start(self, batch: dict[str, Any], batch_idx: int) -> None:
        """Seed torch's RNG (dropout) from (seed, step): a resumed run replays every step exactly.

        Per step rather than per epoch, because creating data loader iterators also draws from
        torch's RNG, and a resumed run creates them at other moments than an uninterrupted one.
        DDP ranks draw distinct masks.
        """
        torch.manual_seed(self.seed * 1_000_003 + self.global_step + 1_000_000_007 * self.global_rank)
        if self.freeze_backbone_steps:
            frozen = self._frozen()
            # A frozen backbone gives the same frames at every step (no dropout): what the cache needs.
            self.predictor.backbone.train(not frozen)
            if not frozen and self.frame_cache is not None:
                # Its own cache is freed; a shared one still serves the modules it was shared with.
                if self.frame_store is None:
                    self.frame_cache.clear()
                else:
                    self.frame_cache = None
            if self.trainer.world_size == 1:
                # Skips the backbone's backward pass while it is frozen. Under DDP the parameter
                # set that receives gradients must not change, so there its learning rate alone is 0.
                for parameter in self._backbone_trainable:
                    parameter.requires_grad_(not frozen)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """One optimisation step on a padded batch."""
        out = self(batch)
        loss = self._loss(out, batch)
        if self.anchor is not None:
            loss = loss + self.anchor()
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["mos"]))
        if self.selection.metric == "train_loss":
            # Read (a device sync) only when selecting on it.
            self._train_loss[0] += float(loss.detach())
            self._train_loss[1] += 1
        return loss

    def _loss(self, out: Prediction, batch: dict[str, Any]) -> torch.Tensor:
        """The loss of a batch on the internal scale; a predictor with a spread also gets the ratings."""
        target = self.predictor.to_internal(batch["target"])
        if out.spread is None:
            return self.loss(out, target, mask=batch["mask"])
        ratings = self.predictor.to_internal(batch["ratings"].to(target))
        return self.loss(out, target, mask=batch["mask"], ratings=ratings)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the training loss since the last validation: a resumed run selects alike."""
        checkpoint["sqa_train_loss_since_validation"] = list(self._train_loss)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the training loss since the last validation."""
        self._train_loss = list(checkpoint.get("sqa_train_loss_since_validation", [0.0, 0]))

    def _collect(self, batch: dict[str, Any], dataloader_idx: int) -> Prediction:
        out = self(batch)
        # Predictions leave the model on the corpus's scale, as its labels are.
        scores = self.predictor.to_scale(out.scores.float()).cpu()
        spread = None if out.spread is None else self.predictor.spread_to_scale(out.spread.float()).cpu()
        # Only a predictor with a spread has a distribution.
        distribution = None if spread is None else self.predictor.distribution
        rows = clip_rows(batch, scores, spread, self.extra_dimensions, distribution)
        self._outputs.setdefault(dataloader_idx, []).extend(rows)
        return out

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Collect predictions and the loss of one validation batch."""
        out = self._collect(batch, dataloader_idx)
        if self.loss is not None:
            size = len(batch["mos"])
            self._val_loss[0] += float(self._loss(out, batch)) * size
            self._val_loss[1] += size

    def test_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Collect predictions of one test batch."""
        self._collect(batch, dataloader_idx)

    def _gathered(self) -> dict[int, list[dict[str, Any]]]:
        """Every rank's collected rows per loader, in dataset order (`gathered_rows`); resets them."""
        outputs, self._outputs = self._outputs, {}
        return gathered_rows(outputs, self.trainer.world_size)

    def _blocks(self, names: Sequence[str]) -> dict[str, dict[str, dict]]:
        """Per dimension, metric blocks of every evaluation set that has labels of it.

        The rows are kept by set in `valid_rows` (what a race judges a candidate on).
        """
        blocks: dict[str, dict[str, dict]] = {}
        self.valid_rows = {}
        for idx, rows in self._gathered().items():
            name = names[idx] if idx < len(names) else str(idx)
            self.valid_rows[name] = rows
            for dim in self.predictor.dimensions:
                pred, true, systems, _ = labelled(rows, dim)
                if pred:
                    blocks.setdefault(dim, {})[name] = metrics.evaluate(pred, true, systems)
        return blocks

    def on_validation_epoch_start(self) -> None:
        """Start a fresh collection for this validation run."""
        self._outputs = {}
        self._val_loss = [0.0, 0]

    def _mean_loss(self, totals: list) -> float:
        """Mean of a [sum, count] accumulator over every DDP rank (NaN when empty)."""
        summed = self.trainer.strategy.reduce(
            torch.tensor(totals, dtype=torch.float64, device=self.device), reduce_op="sum"
        )
        return float(summed[0] / summed[1]) if summed[1] > 0 else math.nan

    def on_validation_epoch_end(self) -> None:
        """Log per-set system SRCC / utterance RMSE, the validation loss, selection score and tiebreak."""
        val_loss = self._mean_loss(self._val_loss)
        train_loss = self._mean_loss(self._train_loss)
        self._train_loss = [0.0, 0]
        by_dim = self._blocks(self.valid_names)
        if not by_dim:
            return
        if self.loss is not None:
            self.log("val/loss", val_loss, add_dataloader_idx=False, sync_dist=True)
        # Metrics are computed from the gathered rows, so every rank logs the same values; the
        # (no-op) sync_dist averaging is what Lightning expects of epoch-level values under DDP.
        for dim, blocks in by_dim.items():
            prefix = "val" if dim == OVERALL else f"val/{dim}"
            for name, block in blocks.items():
                for key, value in (("sys_srcc", block["sys"]["srcc"]), ("utt_rmse", block["utt"]["rmse"])):
                    self.log(f"{prefix}/{name}/{key}", value, add_dataloader_idx=False, sync_dist=True)
        overall = by_dim.get(OVERALL, {})
        self.log(
            "val/selection",
            self.selection.score(overall, val_loss, train_loss),
            prog_bar=True,
            add_dataloader_idx=False,
            sync_dist=True,
        )
        # What the selection callbacks order tied scores by.
        self.log(TIEBREAK_KEY, self.selection.tiebreak(overall), add_dataloader_idx=False, sync_dist=True)

    def on_test_epoch_start(self) -> None:
        """Start a fresh collection for this test run."""
        self._outputs = {}

    def on_test_epoch_end(self) -> None:
        """Compute metrics per test set and their weighted average, with bootstrap intervals."""
        rows = []
        for idx, batch_rows in self._gathered().items():
            name = self.test_names[idx] if idx < len(self.test_names) else str(idx)
            rows.extend({**r, "test_set": name} for r in batch_rows)
        self.set_test_rows(rows)
        for dim, results in {OVERALL: self.test_results, **self.dimension_results}.items():
            prefix = "test" if dim == OVERALL else f"test/{dim}"
            for name, block in results.items():
                for level in ("utt", "sys"):
                    for key in metrics.METRIC_NAMES:
                        value = block[level][key]
                        if not metrics.defined(value):
                            continue  # undefined for this set (see metrics.json's `undefined`)
                        self.log(
                            f"{prefix}/{name}/{level}_{key}", value, add_dataloader_idx=False, sync_dist=True
                        )

    def set_test_rows(self, rows: list[dict[str, Any]]) -> None:
        """Keep test prediction `rows` and their metrics per set and averaged, of every dimension."""
        self.test_predictions = rows
        # A listening test's references and anchors are scored on their own rows, outside `avg`.
        self.test_results = metrics.evaluate_sets(
            *labelled(rows, OVERALL), bootstrap=self.bootstrap, seed=self.seed, apart=ROLES
        )
        self.dimension_results = {}
        for dim in self.extra_dimensions:
            pred, true, systems, sets = labelled(rows, dim)
            if pred:
                self.dimension_results[dim] = metrics.evaluate_sets(
                    pred, true, systems, sets, bootstrap=self.bootstrap, seed=self.seed, apart=ROLES
                )

    def configure_optimizers(self) -> torch.optim.Optimizer | dict[str, Any]:
        """The configured optimizer over all trainable parameters, with the backbone's schedule.

        Without a freeze or a backbone rate scale: one parameter group, as the paper trains.
        """
        if not self.freeze_backbone_steps and self.backbone_lr_scale == 1.0:
            return self.optimizer_factory(p for p in self.parameters() if p.requires_grad)
        # The backbone's own frozen parts (e.g. a wav2vec2 feature extractor) stay frozen.
        backbone = [p for p in self.predictor.backbone.parameters() if p.requires_grad]
        self._backbone_trainable = backbone
        return backbone_optimizer(
            self.optimizer_factory,
            self.parameters(),
            backbone,
            self.backbone_lr_scale,
            self.freeze_backbone_steps,
        )
