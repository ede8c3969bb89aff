"""Print the modules that multi-dataset finetuning stage 2 copies from a stage-1 export.

    python recipes/singmos_pro/stage_modules.py runs/mdf/stage1/export    # -> [backbone,head,pitch]

Stage 2 starts from every trained part of stage 1: the backbone and the head always, the domain
embedding, the pitch branch and the judge embedding when stage 1 had them (read from the export's
config.yaml, so an experiment that sets them is covered as well as a command-line override).
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf


def stage_modules(export_dir: str | Path) -> list[str]:
    """The predictor submodules stage 2 initialises from the export in `export_dir`."""
    path = Path(export_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {export_dir} a stage-1 export directory?")
    model = OmegaConf.to_container(OmegaConf.load(path), resolve=False).get("model")
    if not isinstance(model, dict):
        raise ValueError(f"{path} has no 'model' mapping")
    modules = ["backbone", "head"]
    if model.get("domain_dim"):
        modules.append("domain")
    if model.get("pitch"):
        modules.append("pitch")
    if model.get("judge_dim"):
        modules.append("judge")
    return modules


if __name__ == "__main__":
    print("[" + ",".join(stage_modules(sys.argv[1])) + "]")
