"""Predictors compared on corpora: DNSMOS, Distill-MOS and `sqa-baseline`; `sqa-bench`'s table.

May import: `sqa.core`, `sqa.metrics`, `sqa.data`, `sqa.reports` and `sqa.scoring`; never training.
One module more: `bench` (the `sqa-bench` command) also tests exports (`sqa.exports`) through
training's test pass (`sqa.training`), beside the baselines; Lightning only there, and only for exports.
"""
