"""`sqa-bench`: exports and zero-shot predictors on every corpus of one config, in one table.

The config file (`config`) and the command (`command`): exports scored as `eval.py` scores them,
the baselines as `sqa-baseline` scores them, the constant training-mean predictor beside them.
May import every other layer; Lightning only through `sqa.training`, and only for exports.
"""
