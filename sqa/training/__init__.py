"""One training run and its evaluation, from the composed config to the exported best checkpoint.

Holds the run (`run.train`: plan, prepare, fit, select, test, export; its settings and build),
the LightningModule (its prediction rows and fine-tuning optimizer), the data module, callbacks (a
run's set of them, its stop rules, checkpoint files, the model summary), checkpoint selection,
losses, the run directory, run outputs (the export's data record, what the experiment loggers
get), `eval.py`'s evaluation (`tested`, the one test pass of a predictor) and `sqa-ensemble` (the
`ensemble` package: members, ridge weights).
May import: `sqa.core`, `sqa.metrics`, `sqa.data`, `sqa.models`, `sqa.reports` and `sqa.exports`;
never scoring or baselines.
"""
