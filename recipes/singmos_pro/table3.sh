#!/usr/bin/env bash
# SingMOS-Pro Table 3: SSL, SSL + MIDI pitch, SSL + pitch histogram, as Hydra multiruns over seeds.
#   bash recipes/singmos_pro/table3.sh quick     # synthetic corpus, log-mel backbone, CPU
#   SINGMOS_PRO=/data/SingMOS-Pro W2V_CKPT=/models/wav2vec_vox_new.pt \
#       bash recipes/singmos_pro/table3.sh paper # the paper's setting, on a GPU
# In paper mode the zero-shot DNSMOS row is scored with sqa-baseline when its extra is installed
# (pip install -e '.[baseline]'); the other zero-shot rows are released predictors converted with
# sqa-import (docs/paper.md), named with ZERO_SHOT="LABEL=EXPORT_DIR ..." and scored with eval.py:
#   ZERO_SHOT="SingMOS=exports/singmos_v1 SHEET-ssqa=exports/sheet" SINGMOS_PRO=... W2V_CKPT=... \
#       bash recipes/singmos_pro/table3.sh paper
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-quick}
OUT=${OUT:-runs/$mode/table3}
SEEDS=${SEEDS:-0,1,2}
PY=${PYTHON:-.venv/bin/python}
base=(trainer.enable_progress_bar=false)
if [ "$mode" = paper ]; then
    base+=(experiment=singmos_pro_ssl data.corpus.root="${SINGMOS_PRO:?}" model.backbone.checkpoint="${W2V_CKPT:?}")
fi
for cell in ssl:null midi:midi histogram:histogram; do
    name=${cell%%:*} pitch=${cell#*:}
    "$PY" train.py -m "${base[@]}" model.pitch="$pitch" "seed=$SEEDS" \
        hydra.sweep.dir="$OUT/$name" 'hydra.sweep.subdir=${seed}'
done
zero_shot=()
if [ "$mode" = paper ] && "$PY" -c "import speechmos" 2>/dev/null; then
    [ -f "$OUT/dnsmos/metrics.json" ] || "$PY" -m sqa.baselines.cli --corpus singmos_pro --root "$SINGMOS_PRO" --run-dir "$OUT/dnsmos"
    zero_shot=(--cell "DNSMOS=$OUT/dnsmos")
fi
if [ "$mode" = paper ]; then
    for item in ${ZERO_SHOT:-}; do
        label=${item%%=*} export_dir=${item#*=}
        run="$OUT/zero-shot/$label"
        [ -f "$run/metrics.json" ] || "$PY" eval.py export="$export_dir" data=singmos_pro \
            data.corpus.root="$SINGMOS_PRO" hydra.run.dir="$run"
        zero_shot+=(--cell "$label=$run")
    done
fi
"$PY" -m sqa.reports.results --csv "$OUT/table3.csv" "${zero_shot[@]}" \
    --cell "SSL=$OUT/ssl/*" \
    --cell "SSL + MIDI pitch=$OUT/midi/*" \
    --cell "SSL + pitch histogram=$OUT/histogram/*"
# The paper's layout (MSE, 2 decimals) with the paper's own rows of the table above the runs'.
"$PY" -m sqa.reports.results --paper --csv "$OUT/table3_paper.csv" \
    --paper-rows recipes/singmos_pro/paper_rows.json:table3 "${zero_shot[@]}" \
    --cell "SSL=$OUT/ssl/*" \
    --cell "SSL + MIDI pitch=$OUT/midi/*" \
    --cell "SSL + pitch histogram=$OUT/histogram/*"
