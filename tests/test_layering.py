"""The package's layers, per subpackage: what each may import, and no circle of modules anywhere.

core -> metrics -> data -> models -> reports -> exports -> training | scoring -> baselines, with the
applications on top; one module of baselines (sqa-bench's) also sits above exports and training.
Each module's imports (at any depth of the file, so lazy imports count too) are read from its syntax
tree, without importing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SQA = Path(__file__).resolve().parents[1] / "sqa"

# What each part of sqa may import of sqa (itself included) and which third-party packages it may
# not: only the training layer runs Lightning and Hydra; an export loads and scores without them.
MAY_IMPORT = {
    # The run artefacts (core.artefacts) name the metrics' keys: core and metrics are one layer.
    "core": {"core", "metrics"},
    "metrics": {"core", "metrics"},
    "data": {"core", "metrics", "data"},
    "models": {"core", "data", "models"},
    "reports": {"core", "metrics", "reports"},
    "exports": {"core", "metrics", "data", "models", "reports", "exports"},
    "training": {"core", "metrics", "data", "models", "reports", "exports", "training"},
    "scoring": {"core", "metrics", "data", "models", "exports", "scoring"},
    "baselines": {"core", "metrics", "data", "reports", "scoring", "baselines"},
}
# Modules whose rule is wider than their layer's, by dotted name. sqa-bench tables exports (tested
# through training's evaluation) beside the baselines, and reads what each export trained on from
# its config; the rest of its layer never imports training, nor exports.
MODULE_MAY_IMPORT = {
    "sqa.baselines.bench": MAY_IMPORT["baselines"] | {"exports", "training"},
    "sqa.baselines.bench_training": MAY_IMPORT["baselines"] | {"exports"},
}
TRAINING_ONLY = ("lightning", "hydra")


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports (`import a.b`, `from a.b import c` gives a.b and a.b.c)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path, root: Path = SQA) -> str:
    """`sqa/data/corpus.py` -> 'sqa.data.corpus'; a package's `__init__.py` -> the package."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sqa_modules(root: Path = SQA) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name."""
    return {module_name(path, root): path for path in sorted(root.rglob("*.py"))}


def part(name: str) -> str:
    """The layer a dotted sqa name belongs to: 'sqa.data.corpus' -> 'data', 'sqa.metrics' -> 'metrics'."""
    return name.split(".")[1]


def rule(name: str) -> set[str]:
    """The layers a dotted sqa module may import: its own rule where it has one, else its layer's."""
    return MODULE_MAY_IMPORT.get(name, MAY_IMPORT[part(name)])


def violations(root: Path = SQA) -> list[str]:
    """`module: import` for each import across a layer rule."""
    found = []
    for name, path in sqa_modules(root).items():
        if name == root.name:
            continue  # the package root (`sqa.load`) is the top: it may import any layer
        allowed = rule(name)
        for imported in sorted(imported_modules(path)):
            top = imported.split(".")[0]
            across = top == root.name and "." in imported and part(imported) not in allowed
            if across or (top in TRAINING_ONLY and part(name) != "training"):
                found.append(f"{name}: {imported}")
    return found


def cycles(root: Path = SQA) -> list[list[str]]:
    """The circles in the module graph (an edge per import of another sqa module)."""
    modules = sqa_modules(root)
    edges = {
        name: sorted({m for m in imported_modules(path) if m in modules and m not in (name, root.name)})
        for name, path in modules.items()
    }
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for target in edges[name]:
            if state.get(target) == 1:
                found.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[name] = 2

    for name in edges:
        if name not in state:
            visit(name)
    return found


def test_every_part_of_the_package_has_a_rule():
    parts = {part(name) for name in sqa_modules() if name != "sqa"}
    assert parts == set(MAY_IMPORT)


def test_no_module_imports_across_a_layer_rule():
    assert violations() == []


def test_no_circle_of_modules_anywhere():
    assert cycles() == []


def test_the_top_level_shows_the_layers_only():
    entries = {p.stem for p in SQA.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert {part(name) for name in sqa_modules() if name != "sqa"} == entries - {"__init__"}
    # Ten entries at most, `__init__.py` among them: a new concern joins a layer before it adds one.
    assert len(entries) <= 10


def test_every_module_rule_names_a_module_and_widens_its_layers():
    modules = sqa_modules()
    for name, allowed in MODULE_MAY_IMPORT.items():
        assert name in modules
        assert allowed > MAY_IMPORT[part(name)]


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A throwaway `sqa` package under `root` holding `files` (relative path -> source)."""
    for relative, source in files.items():
        path = root / "sqa" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root / "sqa"


def test_the_checks_catch_an_import_across_a_rule_lazy_or_not(tmp_path):
    package = write_package(
        tmp_path,
        {
            "__init__.py": "from sqa.scoring import scorer\n",
            "data/__init__.py": "",
            "data/corpus.py": "def f():\n    from sqa.training import run\n",
            "models/backbone.py": "from sqa.data import corpus\nimport lightning.pytorch as pl\n",
            "scoring/scorer.py": "from sqa.training.run import x\n",
            "training/run.py": "import lightning\nfrom sqa.scoring import scorer\n",
        },
    )
    assert violations(package) == [
        "sqa.data.corpus: sqa.training",
        "sqa.data.corpus: sqa.training.run",
        "sqa.models.backbone: lightning.pytorch",
        "sqa.scoring.scorer: sqa.training.run",
        "sqa.scoring.scorer: sqa.training.run.x",
        "sqa.training.run: sqa.scoring",
        "sqa.training.run: sqa.scoring.scorer",
    ]


def test_a_circle_is_found_at_any_depth_and_through_lazy_imports(tmp_path):
    package = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "data/__init__.py": "",
            "data/corpus.py": "def f():\n    from sqa.data import readers\n",
            "data/readers.py": "from sqa.data.corpus import Clip\n",
            "data/audio.py": "import sqa.data.corpus\n",
        },
    )
    assert cycles(package) == [["sqa.data.corpus", "sqa.data.readers", "sqa.data.corpus"]]


def test_only_the_module_with_a_rule_of_its_own_imports_beyond_its_layer(tmp_path):
    package = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "baselines/__init__.py": "",
            "baselines/bench.py": "def f():\n    from sqa.training.evaluation import tested\n",
            "baselines/bench_config.py": "from sqa.exports import format\n",
            "baselines/cli.py": "from sqa.training import evaluation\n",
        },
    )
    assert violations(package) == [
        "sqa.baselines.bench_config: sqa.exports",
        "sqa.baselines.bench_config: sqa.exports.format",
        "sqa.baselines.cli: sqa.training",
        "sqa.baselines.cli: sqa.training.evaluation",
    ]


@pytest.mark.parametrize("source", ["import sqa.data.corpus\n", "from sqa.data.corpus import Clip\n"])
def test_an_import_of_the_layer_itself_is_allowed(tmp_path, source):
    package = write_package(tmp_path, {"__init__.py": "", "data/corpus.py": "", "data/audio.py": source})
    assert violations(package) == []
    assert cycles(package) == []
