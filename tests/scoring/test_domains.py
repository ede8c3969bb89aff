"""Scoring a model trained with domain IDs: which domain, said when chosen by default, or their mean."""

from __future__ import annotations

import csv
import re
import warnings

import numpy as np
import pytest
import soundfile as sf
import torch

import sqa
from sqa.exports.format import export_predictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.scoring import cli as score
from sqa.scoring.domains import default_domain_note, resolve_domain, scored_domains
from sqa.scoring.scorer import DomainWarning

DOMAINS = ["p1", "p2", "p3"]
NOTE = (
    "sqa-score: scoring as domain 'p1' (index 0), the first of the 3 this model was trained with "
    "(domain IDs), because no domain was given; --domain NAME|INDEX (domain=) picks one, "
    "--domain mean averages over all"
)


@pytest.fixture(scope="module")
def domain_export(tmp_path_factory):
    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), num_domains=3, domain_dim=4).eval()
    return export_predictor(model, tmp_path_factory.mktemp("domains") / "export", 16000, DOMAINS)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clips")
    rng = np.random.default_rng(0)
    paths = [folder / f"c{i}.wav" for i in range(3)]
    for i, path in enumerate(paths):
        sf.write(path, 0.1 * rng.standard_normal(8000 + 3000 * i), 16000, subtype="FLOAT")
    return [str(p) for p in paths]


def scores(export, clips, tmp_path, capsys, *args) -> tuple[list[float], list[str]]:
    out = tmp_path / "s.csv"
    assert score.main(["--checkpoint", str(export), "--output", str(out), "--overwrite", *args, *clips]) == 0
    with out.open() as fh:
        return [float(r["score"]) for r in csv.DictReader(fh)], capsys.readouterr().err.splitlines()


def test_the_default_domain_is_said_in_one_line_and_a_named_one_is_not(
    domain_export, clips, tmp_path, capsys
):
    default, said = scores(domain_export, clips, tmp_path, capsys)
    assert said == [NOTE]
    first, said_first = scores(domain_export, clips, tmp_path, capsys, "--domain", "p1")
    second, said_second = scores(domain_export, clips, tmp_path, capsys, "--domain", "1")
    assert default == first and said_first == said_second == []
    assert all(abs(a - b) > 1e-4 for a, b in zip(first, second, strict=True))
    with pytest.warns(DomainWarning, match=r"^scoring as domain 'p1' \(index 0\)"):
        assert sqa.load(domain_export).domain_note == NOTE.removeprefix("sqa-score: ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sqa.load(domain_export, domain="p2").domain_note is None


def test_the_mean_over_domains_is_the_mean_of_the_per_domain_scores(domain_export, clips, tmp_path, capsys):
    each = [scores(domain_export, clips, tmp_path, capsys, "--domain", d)[0] for d in DOMAINS]
    mean, said = scores(domain_export, clips, tmp_path, capsys, "--domain", "mean")
    assert said == []
    np.testing.assert_allclose(mean, np.mean(each, axis=0), atol=1e-6)
    # Chunked, each frame's score is the mean over domains too.
    chunked = sqa.load(domain_export, domain="mean", chunk_seconds=0.2).score(clips)
    chunked_each = [sqa.load(domain_export, domain=d, chunk_seconds=0.2).score(clips) for d in DOMAINS]
    np.testing.assert_allclose(chunked, np.mean(chunked_each, axis=0), atol=1e-6)


def test_mean_is_refused_for_a_model_without_domain_ids(default_export):
    with pytest.raises(ValueError, match="no domain embedding"):
        sqa.load(default_export, domain="mean")


def test_mean_takes_the_domains_both_listed_and_embedded_and_an_unnamed_default_is_index_0():
    assert scored_domains("mean", [], 3) == ([0, 1, 2], None)
    assert scored_domains("mean", ["a", "b"], 3) == ([0, 1], None)
    assert scored_domains("mean", ["a", "b", "c", "d"], 3) == ([0, 1, 2], None)
    assert default_domain_note([], 2) == (
        "scoring as domain 0 (index 0), the first of the 2 this model was trained with (domain IDs), "
        "because no domain was given; --domain NAME|INDEX (domain=) picks one, "
        "--domain mean averages over all"
    )


def test_domain_indices_and_the_embedding_bound_on_both_sides():
    assert resolve_domain("1", ["a", "b"]) == 1 and resolve_domain(1, ["a", "b"]) == 1
    # Digits past nine are out of range without being parsed, whatever they would read as.
    for text in ("2", "12345678901", "1" * 5000):
        with pytest.raises(ValueError) as error:
            resolve_domain(text, ["a", "b"])
        assert str(error.value) == f"domain index {text} out of range for domains ['a', 'b']"
    # A listed domain at the embedding's size is refused; one below it is scored.
    assert resolve_domain("b", ["a", "b", "c"], embedded=2) == 1
    refused = (
        "domain 'c' (index 2): the export's config.yaml lists domains ['a', 'b', 'c'], but its model "
        "embeds only 2 (model.num_domains): the first 2 of the list can be scored"
    )
    for ask in (scored_domains, lambda d, ds, e: resolve_domain(d, ds, e)):
        with pytest.raises(ValueError, match=f"^{re.escape(refused)}$"):
            ask("c", ["a", "b", "c"], 2)


def test_the_default_domain_is_said_only_for_a_model_of_several_domains():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert scored_domains(None, ["a"], 1) == ([0], None)
        assert scored_domains(None, ["a", "b"], None) == ([0], None)
    with pytest.warns(DomainWarning) as said:
        assert scored_domains(None, ["a", "b"], 2) == ([0], default_domain_note(["a", "b"], 2))
    assert len(said) == 1


def test_the_scorers_one_domain_is_the_index_asked_and_none_for_the_mean(domain_export, default_export):
    # `domain` is the index fed to the model beside each clip (the s3prl import tests score by it).
    assert [sqa.load(domain_export, domain=d).domain for d in ("p3", 1, "0")] == [2, 1, 0]
    with pytest.warns(DomainWarning):
        assert sqa.load(domain_export).domain == 0
    assert sqa.load(domain_export, domain="mean").domains == [0, 1, 2]
    assert sqa.load(domain_export, domain="mean").domain is None
    assert sqa.load(default_export).domain == 0
