"""Reference predictors scored like a run: DNSMOS, Distill-MOS and `sqa-baseline`.

May import: `sqa.core`, `sqa.metrics`, `sqa.data`, `sqa.reports` and `sqa.scoring`; never training.
"""
