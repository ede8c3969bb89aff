"""sqa's training commands shorten OpenMP's spin before torch loads, unless the user set it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sqa.core.openmp import SPIN_COUNT

REPO = Path(__file__).resolve().parents[2]
# Imports a command's module and prints GOMP_SPINCOUNT as it was when torch was first imported.
PROBE = """
import builtins, os, sys
seen = []
real = builtins.__import__
def hook(name, *args, **kwargs):
    if name == "torch" and not seen:
        seen.append(os.environ.get("GOMP_SPINCOUNT"))
    return real(name, *args, **kwargs)
builtins.__import__ = hook
sys.path.insert(0, sys.argv[1])
{load}
print(seen[0] if seen else "torch never imported")
"""
LOADS = {
    "train.py": "import train",
    "sqa-eval": "import sqa.core.extras as e; e.run_main = lambda *a: __import__('torch'); e.sqa_eval()",
}


def spin_at_torch_import(load: str, preset: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    if preset is not None:
        env["GOMP_SPINCOUNT"] = preset
    probe = PROBE.format(load=load)
    out = subprocess.run(
        [sys.executable, "-c", probe, str(REPO)], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("command", list(LOADS))
def test_the_spin_is_short_when_torch_loads_and_the_users_own_setting_wins(command):
    assert spin_at_torch_import(LOADS[command], None) == SPIN_COUNT
    assert spin_at_torch_import(LOADS[command], "77") == "77"


def test_eval_py_sets_it_before_its_main_imports_torch():
    text = (REPO / "eval.py").read_text(encoding="utf-8")
    assert text.index("short_spin()") < text.index('run_main("sqa.training.evaluation"')
