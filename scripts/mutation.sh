#!/usr/bin/env bash
# Mutation testing of sqa, one module at a time, against the tests that cover it.
#
#   scripts/mutation.sh                              every module in [tool.sqa.mutation] (hours)
#   scripts/mutation.sh sqa/training/selection.py             one module (minutes on 2 CPU cores)
#   scripts/mutation.sh sqa/metrics.py 'sqa.metrics.x_weighted_average*'   only these mutants
#
# pyproject.toml [tool.sqa.mutation] maps each module to its tests, or to another module whose tests it
# shares; [tool.mutmut] holds the settings every module shares. Each module runs in its own copy of
# the working tree under
# $MUTATION_DIR/<dotted module> (default /tmp/sqa-mutation/sqa.data.vocal for sqa/data/vocal.py:
# two modules may share a file name), with [tool.mutmut] narrowed to the module and its tests, at
# nice 19 with one child; a rerun there reuses the results of unchanged functions.
# It prints each module's score ("killed / mutants") and its surviving mutants;
# `cd $MUTATION_DIR/<dotted module> && mutmut show <name>` shows one as a diff. Needs the dev extra.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
python=$(realpath -s "${PYTHON:-.venv/bin/python}")
base=${MUTATION_DIR:-/tmp/sqa-mutation}
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline
unset PYTHONPATH # mutmut puts the mutated copy first on sys.path

if [[ $# -gt 0 && $1 == *.py ]]; then
    modules=("$1")
    shift
else
    mapfile -t modules < <("$python" -c '
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["tool"]["sqa"]["mutation"]))')
fi

for module in "${modules[@]}"; do
    dotted=${module%.py}
    work=$base/${dotted//\//.}
    mkdir -p "$work"
    # The tracked and untracked (not ignored) files of the working tree; mutants/ is kept.
    git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$work"
    "$python" - "$module" "$work/pyproject.toml" <<'EOF'
import json
import re
import sys
import tomllib
from pathlib import Path

module, path = sys.argv[1], Path(sys.argv[2])
text = path.read_text(encoding="utf-8")
config = tomllib.loads(text)["tool"]
mapping = config["sqa"]["mutation"]
tests = mapping.get(module)
if tests is None:
    sys.exit(f"{module}: not in pyproject.toml [tool.sqa.mutation]")
# A module given another module's path runs that module's tests.
if isinstance(tests, str):
    if not isinstance(mapping.get(tests), list):
        sys.exit(f"{module}: maps to {tests}, which has no list of tests in [tool.sqa.mutation]")
    tests = mapping[tests]
# A module's own `-k EXPR` narrows the shared one (pytest keeps only the last -k it is given).
args = list(config["mutmut"]["pytest_add_cli_args"])
if "-k" in tests:
    at = tests.index("-k")
    tests, extra = tests[:at] + tests[at + 2 :], tests[at + 1]
    shared = args.index("-k") + 1
    args[shared] = f"({args[shared]}) and ({extra})"
values = {"only_mutate": [module], "pytest_add_cli_args_test_selection": tests, "pytest_add_cli_args": args}
for key, value in values.items():
    # The array up to its closing bracket (strings may hold brackets).
    pattern = rf'^{key} = \[(?:[^\]"]|"[^"]*")*\]'
    text = re.sub(pattern, lambda _: f"{key} = {json.dumps(value)}", text, count=1, flags=re.M)
path.write_text(text, encoding="utf-8")
EOF
    echo "== $module: $(cd "$work" && "$python" -c "
import tomllib
c = tomllib.load(open('pyproject.toml', 'rb'))['tool']['mutmut']
print(*c['pytest_add_cli_args_test_selection'], '-k', repr(c['pytest_add_cli_args'][-1]))")"
    (
        cd "$work"
        # mutmut maps each function to the tests that called it when it took these stats: without
        # fresh ones, a test added since is never run against the older mutants.
        rm -f mutants/mutmut-stats.json
        # In a session of its own: mutmut leaves its forkserver processes behind when it ends, and
        # ending the session ends them.
        nice -n 19 setsid "$python" -m mutmut run --max-children 1 "$@" >mutmut.log 2>&1 &
        run=$!
        wait "$run" || tail -5 mutmut.log
        pkill -s "$run" || true
        "$python" -m mutmut results --all true >results.txt
        killed=$(grep -c ': killed$' results.txt || true)
        total=$(grep -c ': ' results.txt || true)
        echo "$module: $killed / $total killed"
        grep -v ': killed$' results.txt || true
    )
done
cd "$repo"
