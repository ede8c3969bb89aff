"""sqa: neural MOS prediction for singing quality."""

__version__ = "0.1.0"
