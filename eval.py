"""Hydra entry point: score every test set of a labelled corpus with an exported model.

python eval.py export=runs/x/export                                  # the corpus recorded in the export
python eval.py export=runs/x/export data.corpus.root=DIR             # ... which has moved to DIR
python eval.py export=runs/x/export data=csv data.corpus.path=m.csv  # another labelled corpus
"""

from __future__ import annotations

from sqa.core.extras import run_main
from sqa.core.openmp import short_spin

if __name__ == "__main__":
    # Before torch loads: OpenMP reads its settings once.
    short_spin()
    # Without the `train` extra: one line naming it, not a traceback.
    run_main("sqa.training.evaluation", "eval.py")
