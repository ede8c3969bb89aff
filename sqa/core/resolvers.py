"""Hydra config support that must exist before any sqa config is composed: the `${sqa_precision:}` resolver.

Registered by `import sqa`, so every composer of the configs (train.py, sweeps, tests, notebooks)
has it. Light on purpose: omegaconf is imported only to register (and is absent from a core
install, which then registers nothing), torch only when the resolver is called.
"""

from __future__ import annotations


def default_precision() -> str:
    """bf16 mixed precision on GPUs that support it, fp16 mixed on other GPUs, fp32 on CPU."""
    import torch

    if not torch.cuda.is_available():
        return "32-true"
    return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"


def register_resolvers() -> None:
    """Register sqa's OmegaConf resolvers (`sqa_precision`); nothing where omegaconf is not installed."""
    try:
        from omegaconf import OmegaConf
    except ImportError:
        return
    OmegaConf.register_new_resolver("sqa_precision", default_precision, replace=True)
