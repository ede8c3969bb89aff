#!/usr/bin/env bash
# Mutation testing of sqa's core modules (pyproject.toml [tool.mutmut]) against their fast tests.
#
#   scripts/mutation.sh                          every configured module (hours on 2 CPU cores)
#   scripts/mutation.sh 'sqa.losses.*' 'sqa.masking.*'   only the mutants of these modules
#
# Works on a copy in mutants/ (git-ignored) and prints the surviving mutants at the end;
# `.venv/bin/mutmut show <name>` shows one as a diff. Needs the dev extra (pip install -e .[dev]).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline
nice -n 19 "$python" -m mutmut run "$@"
"$python" -m mutmut results
