"""Exported predictors: the format (write, load), its safe config checks, the model card, importers.

May import: `sqa.core`, `sqa.metrics`, `sqa.data`, `sqa.models` and `sqa.reports`; never training,
scoring, Lightning or Hydra (loading an export needs only the core install).
"""
