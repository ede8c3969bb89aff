#!/usr/bin/env bash
# Judge-aware training (one item per rating with a judge embedding, a mean judge for evaluation)
# against mean-score training, on the synthetic corpus over seeds; prints both with sqa-table.
#   bash recipes/synthetic/judges.sh [extra overrides]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/synthetic/judges}
SEEDS=${SEEDS:-0,1,2}
PY=${PYTHON:-.venv/bin/python}
for cell in mean:null judges:128; do
    name=${cell%%:*} dim=${cell#*:}
    "$PY" train.py -m trainer.enable_progress_bar=false model.judge_dim="$dim" "seed=$SEEDS" \
        hydra.sweep.dir="$OUT/$name" 'hydra.sweep.subdir=${seed}' "$@"
done
"$PY" -m sqa.reports.results --csv "$OUT/judges.csv" \
    --cell "mean-score training=$OUT/mean/*" \
    --cell "judge-aware training=$OUT/judges/*"
