"""Scoring audio with an export: the `Scorer` (`sqa.load`), its inputs and outputs, and `sqa-score`.

May import: `sqa.core`, `sqa.metrics`, `sqa.data`, `sqa.models` and `sqa.exports`; never training,
reports, Lightning or Hydra.
"""
