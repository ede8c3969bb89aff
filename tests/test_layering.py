"""Dependencies point one way: data -> models -> training -> applications, never back.

Each module's imports (at any depth of the file, so lazy imports count too) are read from its
syntax tree, without importing it.
"""

import ast
from pathlib import Path

import pytest

SQA = Path(__file__).resolve().parents[1] / "sqa"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports (`import a.b`, `from a.b import c` gives a.b and a.b.c)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def forbidden_imports(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    """`file: module` for each import of a forbidden module or of anything below it."""
    return sorted(
        f"{path}: {name}"
        for path in paths
        for name in imported_modules(path)
        if any(name == f or name.startswith(f"{f}.") for f in forbidden)
    )


def modules(*names: str) -> list[Path]:
    """The files of the packages (all their modules) and modules named, relative to sqa/."""
    paths = []
    for name in names:
        target = SQA / name
        paths.extend(sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")])
    return paths


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        # The LightningDataModule that wires the data layer to a Trainer is sqa.training.datamodule, in the
        # training layer: scoring and the baselines read data without Lightning.
        (
            ("data",),
            (
                "sqa.models",
                "sqa.training.run",
                "sqa.training.lit_module",
                "sqa.training.datamodule",
                "lightning",
                "hydra",
            ),
        ),
        (("models",), ("lightning", "hydra", "sqa.training.datamodule", "sqa.training.run")),
        (("scoring", "score", "export"), ("lightning",)),
    ],
)
def test_no_layer_imports_a_layer_above_it(layer, forbidden):
    paths = modules(*layer)
    assert paths and all(p.is_file() for p in paths)
    assert forbidden_imports(paths, forbidden) == []


def test_the_scan_sees_lazy_and_from_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nfrom sqa.models import predictor\n\ndef f():\n    import lightning.pytorch as pl\n"
    )
    assert imported_modules(module) >= {"sqa.models", "sqa.models.predictor", "lightning.pytorch"}
    assert forbidden_imports([module], ("lightning", "sqa.models.backbone", "sqa.model")) == [
        f"{module}: lightning.pytorch"
    ]
