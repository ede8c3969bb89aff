"""pyproject.toml's [tool.sqa.mutation]: every module and test it names exists, so no run tests less."""

from __future__ import annotations

import ast

import tomllib

from tests.conftest import REPO

MAPPING = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["sqa"]["mutation"]


def test_every_mapped_module_and_test_exists_and_a_shared_mapping_names_a_list():
    problems = []
    for module, tests in MAPPING.items():
        if not (REPO / module).is_file():
            problems.append(f"{module}: no such module")
        if isinstance(tests, str):
            # Another module's path: its list of tests is run.
            if not isinstance(MAPPING.get(tests), list):
                problems.append(f"{module}: maps to {tests}, which has no list of tests")
            continue
        # scripts/mutation.sh takes `-k EXPR` out wherever it stands; the rest are tests.
        if "-k" in tests:
            at = tests.index("-k")
            tests = tests[:at] + tests[at + 2 :]
        for item in tests:
            path, _, name = item.partition("::")
            if not (REPO / path).exists():
                problems.append(f"{module}: {path} does not exist")
            elif name:
                tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
                if name not in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}:
                    problems.append(f"{module}: {path} has no test {name}")
    assert problems == []
