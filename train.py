"""Hydra entry point: build -> fit -> test every test set -> export the best checkpoint.

python train.py                               # log-mel model on the built-in synthetic corpus
python train.py model/backbone=tiny_wav2vec2  # same run with a tiny wav2vec2
python train.py experiment=singmos_pro_ssl data.corpus.root=... model.backbone.checkpoint=...
"""

from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sqa.training import run


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float:
    """Train one configuration; returns the objective of sweeps (the best selection score, errors negated)."""
    return run(cfg, HydraConfig.get().runtime.output_dir).objective


if __name__ == "__main__":
    main()
