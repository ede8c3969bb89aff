"""ExportError, the one error every check of an export raises, and how it names the key at fault."""

from __future__ import annotations


class ExportError(ValueError):
    """An export directory is missing, incomplete or unsafe to load."""


def _key_path(keys: tuple[str | int, ...]) -> str:
    """`('model', 'backbone', 'arch_kwargs', 0)` -> 'model.backbone.arch_kwargs[0]'."""
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "(top level)"
