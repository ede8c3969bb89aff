"""The predictor as plain `nn.Module`s: backbones (log-mel and SSL sources), branches, the head.

May import: `sqa.core` and `sqa.data`; never training, Lightning or Hydra.
"""
