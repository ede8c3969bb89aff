"""The exports that join an ensemble: loaded, checked against each other, their corpora and records."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from sqa.data.corpus import Clip, Corpus
from sqa.data.pitch import F0Extractor
from sqa.data.readers import recorded_corpus
from sqa.data.valid_split import read_valid_split
from sqa.exports.format import export_json, load_export, regular_file, resolve_export
from sqa.metrics import AVERAGE_KEY
from sqa.models.ensemble import EnsemblePredictor, member_mismatch
from sqa.training.evaluation import clips_to_test, recorded_split

# The carved validation split a run's export holds (`sqa.training.run`).
VALID_SPLIT = "valid_split.csv"


class EnsembleError(ValueError):
    """Exports that cannot be one ensemble, or ensemble weights that cannot be fitted."""


@dataclass
class Member:
    """An export joining the ensemble: its name as given, folder, predictor, config.yaml, f0 extractor."""

    name: str
    directory: Path
    predictor: nn.Module
    config: dict[str, Any]
    f0_extractor: F0Extractor | None


def read_member(path: str | Path) -> Member:
    """The export at `path` loaded as a member (checked as for scoring); an ensemble is refused."""
    predictor, config, f0_extractor = load_export(path)
    if isinstance(predictor, EnsemblePredictor):
        raise EnsembleError(f"{path}: is itself an ensemble; name the exports of its members instead")
    return Member(str(path), resolve_export(path)[0].parent, predictor, config, f0_extractor)


def check_members(members: Sequence[Member]) -> None:
    """EnsembleError naming the first member that cannot join the first one (`sqa.training.ensemble`)."""
    first = members[0]
    for member in members[1:]:
        if member.config["sample_rate"] != first.config["sample_rate"]:
            raise EnsembleError(
                f"{member.name}: scores audio at {member.config['sample_rate']} Hz, {first.name} at "
                f"{first.config['sample_rate']} Hz; an ensemble's members share one sample rate"
            )
    for member in members[1:]:
        # Scoring trims every clip to its vocal span for the whole ensemble, or for none of it.
        if bool(member.config.get("vocal_only")) != bool(first.config.get("vocal_only")):
            raise EnsembleError(
                f"{member.name}: was trained with vocal_only={bool(member.config.get('vocal_only'))}, "
                f"{first.name} with vocal_only={bool(first.config.get('vocal_only'))}; an ensemble's "
                "members are trained on clips cut alike"
            )
    mismatch = member_mismatch([m.predictor for m in members])
    if mismatch is not None:
        index, how = mismatch
        raise EnsembleError(f"{members[index].name} {how} (the first member: {first.name})")
    pitched = [m for m in members if m.f0_extractor is not None]
    for member in pitched[1:]:
        if member.config["f0"] != pitched[0].config["f0"]:
            raise EnsembleError(
                f"{member.name}: extracts f0 with {member.config['f0']}, {pitched[0].name} with "
                f"{pitched[0].config['f0']}; members with a pitch branch share one f0 extractor"
            )
    with_domains = [m for m in members if m.predictor.domain_count is not None]
    for member in with_domains[1:]:
        if member.config.get("domains") != with_domains[0].config.get("domains"):
            raise EnsembleError(
                f"{member.name}: embeds domains {member.config.get('domains')}, {with_domains[0].name} "
                f"{with_domains[0].config.get('domains')}; members with domain IDs share one domain list"
            )


def member_corpus(member: Member) -> Corpus | None:
    """The corpus `member`'s export records, split as its run split it (test, then validation); None: none."""
    record = member.config.get("data") or {}
    if not record.get("corpus"):
        return None
    where = member.directory / "config.yaml"
    corpus = recorded_corpus(record["corpus"], where)
    corpus = clips_to_test(
        corpus, recorded_split(member.directory, record.get("test_split_csv")), False, where
    )
    if (member.directory / VALID_SPLIT).exists():
        split = regular_file(member.directory, VALID_SPLIT)
        corpus = corpus.with_valid(read_valid_split(split), split)
    return corpus


def clip_keys(clips: Sequence[Clip]) -> list[tuple[Any, ...]]:
    """What members' clips must agree on (ID, split, set, role, domain, system, labels), sorted by ID."""
    return sorted(
        (c.sample_id, c.split, c.test_set or "", c.role or "", c.domain, c.system_id, c.mos)
        + tuple(sorted(c.extra_scores.items()))
        for c in clips
    )


def shared_corpus(corpora: Sequence[Corpus | None]) -> Corpus | None:
    """The first corpus where every member records one with the same clips, splits and labels; else None."""
    if any(corpus is None for corpus in corpora):
        return None
    first = clip_keys(corpora[0].clips)
    return corpora[0] if all(clip_keys(c.clips) == first for c in corpora[1:]) else None


def member_record(member: Member) -> dict[str, Any]:
    """What the ensemble's card says of a member: name, backbone, seed and its own test SRCC."""
    info = export_json(member.directory, "run_info.json")
    metrics = export_json(member.directory, "metrics.json")
    blocks = {k: v for k, v in metrics.items() if isinstance(v, dict)} if isinstance(metrics, dict) else {}
    block = blocks.get(AVERAGE_KEY) or (next(iter(blocks.values())) if len(blocks) == 1 else {})
    # A run's export is <run dir>/export: the run directory names it.
    name = member.directory.parent.name if member.directory.name == "export" else member.directory.name
    return {
        "name": name,
        "backbone": type(member.predictor.backbone).__name__,
        "seed": info.get("seed") if isinstance(info, dict) else None,
        "utt_srcc": (block.get("utt") or {}).get("srcc"),
        "sys_srcc": (block.get("sys") or {}).get("srcc"),
    }


def rebased_data(member: Member, output: Path) -> dict[str, Any]:
    """`member`'s recorded data with the corpus folder relative to the ensemble's folder `output`."""
    data = dict(member.config["data"])
    corpus = dict(data["corpus"])
    if corpus.get("root") is not None:
        folder = (member.directory / str(corpus["root"])).resolve()
        corpus["root"] = os.path.relpath(folder, output.resolve())
    data["corpus"] = corpus
    return data
