"""Corpora and audio: readers, validation, the synthetic corpus, audio loading, f0, datasets and samplers.

May import: `sqa.core` and `sqa.metrics`; never models, training, Lightning or Hydra.
"""
