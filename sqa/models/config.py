"""Typed architecture configs: what a model's `export_config()` records, declared once per class.

Each exportable class keeps an instance of its config dataclass in `self.config`. The fields
are the constructor arguments that define the architecture, not the paths of pretrained weights
nor training settings such as gradient checkpointing, so a Hydra config or an export rebuilds the
same architecture from them.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ClassVar


class Exportable:
    """Mixin: `export_config()` from the instance's config dataclass and its exported children."""

    config: Any
    # Exported sub-modules, written before the config fields (e.g. the predictor's backbone).
    exported_children: ClassVar[tuple[str, ...]] = ()
    # The module a `_target_` names: where the class is public, not where it is defined.
    public_module: ClassVar[str | None] = None

    @classmethod
    def export_target(cls) -> str:
        """The `_target_` string that builds this class, e.g. 'sqa.models.ssl.S3prlWav2Vec2'."""
        return f"{cls.public_module or cls.__module__}.{cls.__qualname__}"

    def export_config(self) -> dict[str, Any]:
        """Hydra config rebuilding this architecture (random init, no pretrained-weight paths)."""
        children = {name: getattr(self, name).export_config() for name in self.exported_children}
        return {"_target_": self.export_target(), **children, **dataclasses.asdict(self.config)}


def constructor_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The named arguments `cls(...)` takes, with those its `**kwargs` forwards to its base class.

    A family that only adds to its base (`AlignedPredictor`) takes the base's arguments as
    `**kwargs`; a config node may name them all, and each is checked against the base's annotation.
    """
    parameters: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        own = inspect.signature(klass.__init__).parameters.values()
        for parameter in own:
            if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
                parameters.setdefault(parameter.name, parameter)
        if not any(parameter.kind is parameter.VAR_KEYWORD for parameter in own):
            break
    return parameters
