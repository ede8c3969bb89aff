"""sqa-bench: exports and zero-shot predictors on many corpora, in one table (`sqa.bench.command`)."""
