"""What a person reads of runs: result tables (`sqa-table`), paired comparisons (`sqa-compare`), plots.

May import: `sqa.core` and `sqa.metrics`; never data, models, training or scoring.
"""
