"""One training run and its evaluation, from the composed config to the exported best checkpoint.

Holds the run (its settings and build), the LightningModule (its prediction rows and fine-tuning
optimizer), the data module, callbacks (a run's set of them, checkpoint files, the model summary),
checkpoint selection, losses, the run directory, run outputs (the export's data record, what the
experiment loggers get), `eval.py`'s evaluation, the default run's candidates and `sqa-ensemble`
(the `ensemble` package: members, testing, ridge weights).
May import: `sqa.core`, `sqa.metrics`, `sqa.data`, `sqa.models`, `sqa.reports` and `sqa.exports`;
never scoring or baselines.
"""
