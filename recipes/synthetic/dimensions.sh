#!/usr/bin/env bash
# Three-head model (overall, lyrics, melody) on the synthetic corpus over seeds, then each extra
# dimension's own head against the overall prediction as predictor of that dimension.
#   bash recipes/synthetic/dimensions.sh [extra overrides]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/synthetic/dimensions}
SEEDS=${SEEDS:-0,1,2}
PY=${PYTHON:-.venv/bin/python}
"$PY" train.py -m trainer.enable_progress_bar=false "model.dimensions=[mos,lyrics,melody]" "seed=$SEEDS" \
    hydra.sweep.dir="$OUT" 'hydra.sweep.subdir=${seed}' "$@"
"$PY" recipes/synthetic/dimensions.py "$OUT/[0-9]*"
