"""train.py's command-line settings that name no setting: refused before the run, with a 'did you mean'.

Hydra refuses `data.corpus.score_rnage=[0,100]` with the advice to add the key with `+`, and
followed, that advice gives a setting the corpus reader fails on; `+trainer.max_step=10` is taken
and fails only when Lightning's Trainer is built, after the corpus is read and every candidate is
prepared. `refusal` checks a command line against train.yaml composed with its config-group
choices, before Hydra composes it or the run makes its folder:

- a key that does not exist (set or deleted without `+`) is refused, naming the closest key at
  its level (difflib) or, where none is close, the keys there;
- a key added with `+` (or `++`) is refused where it is this close to an existing key of its level
  (`ADD_CUTOFF`): `+trainer.max_step` for trainer.max_steps. A key far from every existing one is
  added as before (`+candidates.models.mine=[...]`), and so is a keyword that the level's
  `_target_` takes (`+callbacks.checkpoint.save_top_k=3`, `+data.corpus.systems_per_batch=[...]`).

A command line this check cannot read (a syntax error, a sweep over config groups, another
configuration) is left to Hydra.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

# difflib's default: the suggestion for a key that does not exist.
CUTOFF = 0.6
# A key added with `+` this close to an existing one (max_step: max_steps 0.94, score_rnage:
# score_range 0.91) is taken for a typo of it; names users add differ more (save_top_k: save_last 0.63).
ADD_CUTOFF = 0.85
# Levels whose keys are names users choose: a new one is never a typo of another (logmel2, logmel).
OPEN = ("candidates.models",)
# At most this many keys are listed where none is close.
LISTED = 12
# Options of the command line that choose another configuration, or print and end without one.
OTHER_RUNS = ("help", "hydra_help", "shell_completion", "config_path", "config_name", "config_dir")


def command_overrides(argv: Sequence[str]) -> list[str] | None:
    """The overrides of a train.py command line `argv` (without the program), or None to leave it to Hydra.

    None where the command line chooses another configuration, asks for help or a version, or
    does not parse: Hydra says what it says about those.
    """
    # Imported here: the parser @hydra.main reads the command line with (Hydra has no public one).
    from hydra._internal.utils import get_args_parser

    if "--version" in argv:
        return None
    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        args, unknown = parser.parse_known_args(list(argv))
    except argparse.ArgumentError:
        return None
    if unknown or any(getattr(args, name, None) for name in OTHER_RUNS) or args.experimental_rerun:
        return None
    return list(args.overrides)


def refusal(
    overrides: Sequence[str], compose: Callable[[list[str]], DictConfig], conf_dir: Path
) -> str | None:
    """Why the command line `overrides` is refused (a line naming the key), or None.

    `compose` gives train.yaml composed with a list of overrides; `conf_dir` is its folder, whose
    subfolders are the config groups.
    """
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return None
    own = [o for o in parsed if not o.is_hydra_override()]
    is_group = [o.package is not None or (conf_dir / o.key_or_group).is_dir() for o in own]
    groups = [o for o, group in zip(own, is_group, strict=True) if group]
    if any(o.is_sweep_override() for o in groups):
        return None  # one configuration per choice: left to Hydra
    try:
        cfg = compose([str(o.input_line) for o in groups])
    except (HydraException, OmegaConfBaseException):
        return None
    for override, group in zip(own, is_group, strict=True):
        # A group that does not exist (model/backbon=x) is Hydra's to refuse, with its choices.
        if group or "/" in override.key_or_group:
            continue
        reason = _check(cfg, override)
        if reason is not None:
            return reason
        if not _apply(cfg, override):
            return None  # Hydra's error says what is wrong with the value
    return None


def _check(cfg: DictConfig, override: Override) -> str | None:
    """Why `override` names no setting of `cfg` (with the overrides before it applied), or None."""
    parts = override.key_or_group.split(".")
    node: object = cfg
    for depth, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            return None  # a key inside a value (a list, None): Hydra's error says so
        # Keys, not `in`: a mandatory value not given yet (`???`) is a setting too.
        if part not in list(node):
            return _missing(node, ".".join(parts[:depth]), part, override)
        if depth + 1 < len(parts):
            try:
                node = node[part]
            except OmegaConfBaseException:
                return None  # an interpolation that does not resolve here
    return None


def _missing(node: DictConfig, level: str, part: str, override: Override) -> str | None:
    """Why `part`, missing at `level` (`node`), is refused for `override`, or None where it may be added."""
    key = _join(level, part)
    accepted = _target_keywords(node)
    settings = [str(k) for k in node]
    # What the level's target takes but the configuration does not set: named with the + it needs.
    extra = sorted(accepted - set(settings))
    known = settings + extra

    def named(name: str) -> str:
        return ("+" if name in extra else "") + _join(level, name)

    if override.is_add() or override.is_force_add():
        close = difflib.get_close_matches(part, known, n=1, cutoff=ADD_CUTOFF)
        if level in OPEN or part in accepted or not close:
            return None
        return (
            f"{override.get_key_element()}: no such setting; did you mean {named(close[0])}? "
            "(+ adds a setting, and this one is too close to an existing name to be a new one)"
        )
    if part in accepted:
        return (
            f"{key}: not set in the configuration, though {node['_target_']} takes it: "
            f"add it with +{override.input_line}"
        )
    close = difflib.get_close_matches(part, known, n=1, cutoff=CUTOFF)
    if close:
        return f"{key}: no such setting; did you mean {named(close[0])}?"
    if level in OPEN:
        return f"{key}: no such setting; a new one is added with +{override.input_line}"
    return f"{key}: no such setting ({level or 'the top level'} has {_listed(settings, extra)})"


def _listed(settings: list[str], extra: list[str]) -> str:
    """The settings of a level, then those its target also takes with +, at most `LISTED` in all."""
    names = [k for k in settings if not k.startswith("_")]
    text = ", ".join(names[:LISTED]) + (", ..." if len(names) > LISTED else "")
    room = max(0, LISTED - len(names))
    if extra and room:
        text += "; with +: " + ", ".join(extra[:room]) + (", ..." if len(extra) > room else "")
    return text


def _join(level: str, name: str) -> str:
    """The dotted key of `name` at `level` ('' is the top)."""
    return f"{level}.{name}" if level else name


def _target_keywords(node: DictConfig) -> set[str]:
    """The keyword arguments that `node`'s `_target_` takes by name (none where it has no target)."""
    target = node.get("_target_") if "_target_" in node else None
    if not isinstance(target, str):
        return set()
    try:
        made = get_object(target)
    except Exception:  # noqa: BLE001 - a target that does not import is the run's error, not a typo
        return set()
    # A class passing **kwargs to its base (SelectionCheckpoint to ModelCheckpoint) takes the base's.
    functions = (
        [c.__init__ for c in made.__mro__ if "__init__" in vars(c)] if inspect.isclass(made) else [made]
    )
    named: set[str] = set()
    for function in functions:
        try:
            parameters = inspect.signature(function).parameters.values()
        except (TypeError, ValueError):
            break
        named |= {
            p.name
            for p in parameters
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
        }
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    return named


def _apply(cfg: DictConfig, override: Override) -> bool:
    """Apply `override` to `cfg` as Hydra does (the keys it adds exist for later ones); False if it fails."""
    if override.is_sweep_override():
        return True  # its key is checked; each job's value is the sweep's
    key = override.key_or_group
    try:
        value = override.value()
        if override.is_delete():
            parent, _, name = key.rpartition(".")
            node = OmegaConf.select(cfg, parent) if parent else cfg
            with open_dict(node):
                del node[name]
        else:
            OmegaConf.update(cfg, key, value, merge=True, force_add=True)
    except (HydraException, OmegaConfBaseException, KeyError, TypeError):
        return False
    return True
