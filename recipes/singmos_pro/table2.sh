#!/usr/bin/env bash
# SingMOS-Pro Table 2: domain ID x multi-dataset finetuning (4 cells), over seeds, then the table.
#   bash recipes/singmos_pro/table2.sh quick     # synthetic corpus, log-mel backbone, CPU
#   SINGMOS_PRO=/data/SingMOS-Pro W2V_CKPT=/models/wav2vec_vox_new.pt \
#       bash recipes/singmos_pro/table2.sh paper # the paper's setting, on a GPU
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-quick}
OUT=${OUT:-runs/$mode/table2}
SEEDS=${SEEDS:-0 1 2}
PY=${PYTHON:-.venv/bin/python}
common=(trainer.enable_progress_bar=false)
base=()
if [ "$mode" = paper ]; then
    base=(data.corpus.root="${SINGMOS_PRO:?}" model.backbone.checkpoint="${W2V_CKPT:?}")
    export BASE=singmos_pro_ssl
    plain=(experiment=singmos_pro_ssl)
else
    plain=()
fi
for seed in $SEEDS; do
    for cell in base:null domain:128; do
        name=${cell%%:*} dim=${cell#*:}
        "$PY" train.py "${plain[@]}" "${base[@]}" "${common[@]}" seed="$seed" model.domain_dim="$dim" \
            hydra.run.dir="$OUT/$name/$seed"
        RUN="$OUT/mdf_$name/$seed" bash recipes/singmos_pro/mdf.sh "${base[@]}" "${common[@]}" \
            seed="$seed" model.domain_dim="$dim"
    done
done
"$PY" -m sqa.reports.results --csv "$OUT/table2.csv" \
    --cell "SSL=$OUT/base/*" \
    --cell "SSL + domain ID=$OUT/domain/*" \
    --cell "SSL + MDF=$OUT/mdf_base/*/stage2" \
    --cell "SSL + domain ID + MDF=$OUT/mdf_domain/*/stage2"
# The paper's layout (MSE, 2 decimals) with the paper's own rows of the table above the runs'.
"$PY" -m sqa.reports.results --paper --csv "$OUT/table2_paper.csv" \
    --paper-rows recipes/singmos_pro/paper_rows.json:table2 \
    --cell "SSL=$OUT/base/*" \
    --cell "SSL + domain ID=$OUT/domain/*" \
    --cell "SSL + MDF=$OUT/mdf_base/*/stage2" \
    --cell "SSL + domain ID + MDF=$OUT/mdf_domain/*/stage2"
