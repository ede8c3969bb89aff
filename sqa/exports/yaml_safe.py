"""The restricted YAML loader of an export's config.yaml: `yaml.SafeLoader` without aliases or long integers.

An integer of more than MAX_INTEGER_DIGITS digits is left unconverted (`_LongInteger`) for the
config checks (`sqa.exports.config`) to refuse, naming the key that holds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sqa.exports.bounds import MAX_INTEGER_DIGITS
from sqa.exports.errors import ExportError


class _LongInteger:
    """An integer of more than MAX_INTEGER_DIGITS digits, left unconverted for `_check_plain` to refuse."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def refusal(self, where: Path, what: str) -> ExportError:
        """The error naming the file and `what` holds this integer."""
        return ExportError(
            f"{where}: {what} is an integer of {self.digits} digits; config.yaml integers have at most "
            f"{MAX_INTEGER_DIGITS}"
        )


class _PlainYamlLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` without aliases (nested aliases expand exponentially; exports need none)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_long_int(self, node: yaml.ScalarNode) -> int | _LongInteger:
        """An integer, or a `_LongInteger` where converting it would fail or take long."""
        # Converted here, the ValueError (past 4300 digits) could not name the key that holds it.
        digits = sum(c.isalnum() for c in node.value)
        return _LongInteger(digits) if digits > MAX_INTEGER_DIGITS else self.construct_yaml_int(node)


_PlainYamlLoader.add_constructor("tag:yaml.org,2002:int", _PlainYamlLoader.construct_long_int)
