"""What every layer uses: atomic writes, run artefacts, masking, bootstrap resampling, renames.

Holds `atomic` (files replaced whole), `artefacts` (metrics.json and predictions.csv), `masking`
(masked means over valid frames), `prediction` (the `Prediction` record), `resampling` (bootstrap
indices), `extras` (naming a missing optional extra), `provenance` (package versions),
`resolvers` (sqa's OmegaConf resolvers) and `renames` (the table of moved dotted paths).
May import: nothing of sqa outside `sqa.core` but `sqa.metrics` (whose keys the artefacts name).
"""
