"""One training run and its evaluation, from the composed config to the exported best checkpoint.

Holds the run, the LightningModule, the data module, callbacks, checkpoint selection, losses, the
run directory, run outputs and `eval.py`'s evaluation.
May import: `sqa.core`, `sqa.metrics`, `sqa.data`, `sqa.models`, `sqa.reports` and `sqa.exports`;
never scoring or baselines.
"""
