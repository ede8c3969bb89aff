#!/usr/bin/env bash
# Create (or reuse) .venv in the project root and install sqa with its dependencies.
# Usage: bash scripts/setup.sh [extra]   default `all` (every feature); `dev` adds the test tools;
# `bash scripts/setup.sh ""` installs the core only (loading exports and scoring audio).
set -euo pipefail
cd "$(dirname "$0")/.."

# soundfile needs the system libsndfile; fairseq2n links against it too.
if ! ldconfig -p | grep -q libsndfile.so.1; then
    if command -v apt-get >/dev/null; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        $SUDO apt-get update -qq
        $SUDO apt-get install -y -qq libsndfile1
    else
        echo "sqa setup: install the system package libsndfile1 (libsndfile.so.1), then rerun" >&2
        exit 1
    fi
fi

PYTHON="${PYTHON:-python3.11}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade "pip>=24" "setuptools>=69,<81" wheel
extra="${1-all}"
target="."
[ -n "$extra" ] && target=".[$extra]"
# pyproject.toml declares ranges; scripts/constraints.txt pins the exact versions installed here
# (through the environment, so the constraint also reaches pyworld's isolated build).
PIP_CONSTRAINT="$PWD/scripts/constraints.txt" .venv/bin/python -m pip install -q -e "$target"
