"""The small user-style table: deterministic, as mixed as a user's files, rated after its systems."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
from scipy import stats

from sqa.data.corpus import CorpusError
from sqa.data.small_table import SECONDS, SYSTEMS, generate, load_small_table


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return load_small_table(tmp_path_factory.mktemp("t") / "mos", seed=3, clips=30)


def test_the_table_is_a_csv_of_six_systems_in_mixed_formats_rates_and_channels(table):
    assert len(table.clips) == 30
    assert sorted({c.system_id for c in table.clips}) == [f"sys{i}" for i in range(1, 7)]
    assert {c.split for c in table.clips} == {"train"}
    infos = [sf.info(str(c.path)) for c in table.clips]
    assert {i.samplerate for i in infos} == {16000, 22050, 44100}
    assert {i.channels for i in infos} == {1, 2}
    assert {c.path.suffix for c in table.clips} == {".wav", ".flac"}
    durations = [i.frames / i.samplerate for i in infos]
    assert SECONDS[0] - 0.01 <= min(durations) and max(durations) <= SECONDS[1] + 0.01
    assert {c.sample_id.split("_")[1] for c in table.clips} == {"solo", "duet", "accompanied"}


def test_ratings_follow_the_systems_quality(table):
    quality = {f"sys{i + 1}": q for i, (_, _, q) in enumerate(SYSTEMS)}
    means = {s: np.mean([c.mos for c in table.clips if c.system_id == s]) for s in quality}
    assert stats.spearmanr([quality[s] for s in quality], [means[s] for s in quality])[0] > 0.8
    assert all(1.0 <= c.mos <= 5.0 for c in table.clips)


def test_the_same_seed_writes_the_same_table_and_another_seed_another(tmp_path):
    generate(tmp_path / "a", seed=1, clips=12)
    generate(tmp_path / "b", seed=1, clips=12)
    generate(tmp_path / "c", seed=2, clips=12)
    text = {k: (tmp_path / k / "ratings.csv").read_text(encoding="utf-8") for k in "abc"}
    assert text["a"] == text["b"] != text["c"]
    first = sorted((tmp_path / "a" / "audio").iterdir())[0]
    assert first.read_bytes() == (tmp_path / "b" / "audio" / first.name).read_bytes()


def test_the_mushra_scale_has_a_row_per_listener_on_0_to_100(tmp_path):
    corpus = load_small_table(tmp_path / "m", seed=0, clips=12, scale="mushra")
    assert corpus.score_range == (0.0, 100.0)
    lines = (tmp_path / "m" / "ratings.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "wav_path,score,system_id,sample_id,listener_id"
    assert len(lines) - 1 == 4 * 12
    assert all(len(c.ratings) == 4 for c in corpus.clips)
    assert any(c.mos > 50 for c in corpus.clips) and all(0 <= c.mos <= 100 for c in corpus.clips)


def test_bad_requests_and_another_corpus_are_refused(tmp_path):
    with pytest.raises(ValueError, match="at least 12"):
        generate(tmp_path / "x", clips=11)
    with pytest.raises(ValueError, match="scale must be one of"):
        generate(tmp_path / "x", scale="stars")
    generate(tmp_path / "t", seed=0, clips=12)
    with pytest.raises(CorpusError, match="already exists"):
        generate(tmp_path / "t", seed=0, clips=12)
    with pytest.raises(CorpusError, match="holds another corpus than the small table seed=1"):
        load_small_table(tmp_path / "t", seed=1, clips=12)
    with pytest.raises(CorpusError, match="differs from the mos scale"):
        load_small_table(tmp_path / "t", seed=0, clips=12, score_range=[0, 100])
    assert len(load_small_table(tmp_path / "t", seed=0, clips=12, score_range=[1, 5]).clips) == 12
    with pytest.raises(CorpusError, match="no small table there"):
        load_small_table(tmp_path / "missing", allow_generate=False)
