"""Exported predictors: the format (write, load), its safe config checks, the model card, importers.

May import: `sqa.core`, `sqa.metrics`, `sqa.data`, `sqa.models` and `sqa.reports`; never training,
scoring, Lightning or Hydra (loading an export needs only the core install).

One concept per module:
    format.py         writing and loading an export; its data files and run records
    location.py       where an export's files are: the folder a path names, its regular files
    weights.py        the weights archive (model.pt), read as checked plain tensors
    config.py         config.yaml's checks, and building its checked nodes
    yaml_safe.py      the restricted YAML loader of config.yaml
    targets.py        the classes a `_target_` may name, and where in config.yaml
    bounds.py         size limits, bounded reads and the bounds of a model's settings
    errors.py         ExportError, and how it names the key at fault
    model_card.py     the model card (README.md) and the releases it names
    card_sections.py  the card's sections drawn from the run's records
    datastore.py      datastore.pt, the training clips' embeddings for kNN scoring
    residual.py       the residual spread an export records
    importers.py      released predictors into exports (sqa-import)
"""
