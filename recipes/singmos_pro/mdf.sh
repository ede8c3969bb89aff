#!/usr/bin/env bash
# Multi-dataset finetuning in one command: stage 1 (batch p1's training set, 10 epochs) into
# $RUN/stage1, then stage 2 (whole training set, initialised from stage 1) into $RUN/stage2.
# Each stage is an ordinary run; either can also be run alone with train.py.
#   RUN=runs/mdf bash recipes/singmos_pro/mdf.sh [extra overrides, e.g. seed=1 model.domain_dim=128]
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=${RUN:?set RUN to the output folder}
PY=${PYTHON:-.venv/bin/python}
# BASE holds the experiment(s) both stages share, e.g. BASE=singmos_pro_ssl for the paper.
stage1=(mdf_stage1) stage2=(mdf_stage2)
if [ -n "${BASE:-}" ]; then stage1=("$BASE" mdf_stage1) stage2=("$BASE" mdf_stage2); fi
"$PY" train.py "experiment=[$(IFS=,; echo "${stage1[*]}")]" hydra.run.dir="$RUN/stage1" "$@"
# Stage 2 copies every trained part of stage 1: backbone, head, and its domain / pitch branches.
modules=$("$PY" recipes/singmos_pro/stage_modules.py "$RUN/stage1/export")
"$PY" train.py "experiment=[$(IFS=,; echo "${stage2[*]}")]" hydra.run.dir="$RUN/stage2" \
    init_from.checkpoint="$RUN/stage1/export" "init_from.modules=$modules" "$@"
