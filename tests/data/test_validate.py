"""Up-front corpus validation: every problem reported by file; raise by default, skip on request."""

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.data.corpus import Clip, Corpus, CorpusError
from sqa.data.validate import ON_SCREEN, CorpusProblems, format_report, scale_diagnosis, validate_corpus
from sqa.training.datamodule import MOSDataModule


def tone(path: Path, seconds: float = 0.5, sr: int = 16000) -> Path:
    t = np.arange(int(sr * seconds)) / sr
    sf.write(path, 0.2 * np.sin(2 * np.pi * 220 * t), sr)
    return path


def clip(sample_id, path, split="train", mos=3.0, system="s1", domain="d1"):
    return Clip(sample_id, Path(path), mos, system, domain, split, "test" if split == "test" else None)


@pytest.fixture
def messy_corpus(tmp_path):
    good = [
        clip(f"g{i}", tone(tmp_path / f"g{i}.wav"), split)
        for i, split in enumerate(["train", "train", "valid", "test"])
    ]
    sf.write(tmp_path / "silent.wav", np.zeros(8000), 16000)
    sf.write(tmp_path / "empty.wav", np.zeros(0), 16000)
    sf.write(tmp_path / "nan.wav", np.full(8000, np.nan, dtype=np.float32), 16000, subtype="FLOAT")
    (tmp_path / "broken.flac").write_bytes(b"fLaC\x00\x00\x00\x22" + bytes(40))
    tone(tmp_path / "short.wav", seconds=0.01)
    bad = [
        clip("missing", tmp_path / "missing.wav"),
        clip("silent", tmp_path / "silent.wav"),
        clip("empty", tmp_path / "empty.wav"),
        clip("nan", tmp_path / "nan.wav"),
        clip("broken", tmp_path / "broken.flac"),
        clip("short", tmp_path / "short.wav"),
        clip("nanscore", tone(tmp_path / "a.wav"), mos=float("nan")),
        clip("toohigh", tone(tmp_path / "b.wav"), mos=7.0),
        clip("g0", tone(tmp_path / "dup.wav")),
        clip("nosys", tone(tmp_path / "c.wav"), system="ghost"),
        clip("nodomain", tone(tmp_path / "d.wav"), domain="d9"),
    ]
    return Corpus(good + bad, ["d1"], (1.0, 5.0), frozenset({"s1"}))


EXPECTED = {
    "missing": "audio file not found",
    "silent": "all silent",
    "empty": "no samples",
    "nan": "NaN or infinite",
    "broken": "cannot read audio",
    "short": "shorter than the 400-sample receptive field",
    "nanscore": "score is nan",
    "toohigh": "outside the scale",
    "g0": "duplicate sample ID",
    "nosys": "unknown system 'ghost'",
    "nodomain": "unknown domain/batch 'd9'",
}


def test_every_problem_is_reported_by_file(messy_corpus):
    problems = validate_corpus(messy_corpus, 16000, 400)
    for sample_id, message in EXPECTED.items():
        matching = [p for p in problems if p.sample_id == sample_id and message in p.what]
        assert matching, f"{sample_id}: no problem containing {message!r} in {problems}"
        assert matching[0].where.endswith((".wav", ".flac"))
    assert not [p for p in problems if p.sample_id in ("g1", "g2", "g3")]


def test_empty_splits_are_problems(tmp_path):
    corpus = Corpus([clip("a", tone(tmp_path / "a.wav"))], ["d1"])
    assert {p.where for p in validate_corpus(corpus, 16000, 400)} == {"valid split", "test split"}


def test_default_stops_with_the_whole_report(messy_corpus):
    with pytest.raises(CorpusError) as err:
        MOSDataModule(messy_corpus)
    report = str(err.value)
    assert report.startswith(f"{len(validate_corpus(messy_corpus, 16000, 400))} problem(s)")
    assert all(message in report for message in EXPECTED.values())
    assert "data.on_error=skip" in report


def test_skip_drops_bad_clips_and_keeps_the_report(messy_corpus):
    dm = MOSDataModule(messy_corpus, on_error="skip")
    assert sorted(c.sample_id for c in dm.corpus.clips) == ["g1", "g2", "g3"]
    assert {p.sample_id for p in dm.problems} == set(EXPECTED)


def test_ratings_outside_the_scale_are_problems_even_when_their_mean_is_inside(tmp_path):
    wav = tone(tmp_path / "a.wav")
    mixed = Clip("mixed", wav, 3.0, "s1", "d1", "train", ratings={"j1": 0.0, "j2": 6.0})
    fine = Clip("fine", wav, 3.0, "s1", "d1", "train", ratings={"j1": 2.0, "j2": 4.0})
    corpus = Corpus([mixed, fine], ["d1"], (1.0, 5.0), frozenset({"s1"}))
    problems = [p for p in validate_corpus(corpus, 16000, 400) if p.sample_id is not None]
    assert [p.sample_id for p in problems] == ["mixed"]
    assert problems[0].what == (
        "rating(s) 0.0 by 'j1', 6.0 by 'j2' outside the scale [1.0, 5.0] (data.corpus.score_range)"
    )
    # On a 0-10 scale the same ratings are fine.
    wide = Corpus([mixed, fine], ["d1"], (0.0, 10.0), frozenset({"s1"}))
    assert not [p for p in validate_corpus(wide, 16000, 400) if p.sample_id is not None]


def scaled_corpus(folder: Path, scores: list[float], scale=(1.0, 5.0)) -> Corpus:
    """Clips rated `scores` (train, valid and test in turn), one audio file shared."""
    wav = tone(folder / "a.wav")
    splits = ["train", "valid", "test"]
    clips = [clip(f"c{i}", wav, splits[i % 3], mos=v, system=f"s{i % 4}") for i, v in enumerate(scores)]
    return Corpus(clips, ["d1"], scale)


def test_a_wrong_scale_is_one_line_naming_the_setting_first_and_skipping_cannot_hide_it(tmp_path):
    # A 0-100 test under the default 1-5 scale: all but the clip rated 3 out of it.
    corpus = scaled_corpus(tmp_path, [3.0 * i for i in range(33)])
    assert scale_diagnosis(corpus) == (
        "the ratings of 32 of 33 clips lie outside the scale [1, 5]; all ratings lie in [0, 100] "
        "(from 0 to 96): set data.corpus.score_range=[0,100]"
    )
    for on_error in ("raise", "skip"):
        with pytest.raises(CorpusProblems) as err:
            MOSDataModule(corpus, on_error=on_error)
        lines = str(err.value).splitlines()
        assert lines[0] == scale_diagnosis(corpus) and "on_error=skip" not in str(err.value)
        # The on-screen list is capped; the error keeps every problem for data_problems.txt.
        assert lines[1] == "32 problem(s) in the corpus:" and len(lines) == 2 + ON_SCREEN + 1
        assert lines[-1] == "  ... and 12 more (all of them: data_problems.txt in the run directory)"
        assert len(err.value.problems) == 32
    assert len(format_report(err.value.problems).splitlines()) == 33
    # The scale named is the narrowest common one holding every rating; else the ratings' range.
    assert scale_diagnosis(scaled_corpus(tmp_path, [0.5, 7.0, 9.5, 2.0])).endswith("score_range=[0,10]")
    assert scale_diagnosis(scaled_corpus(tmp_path, [-3.0, 7.0, 150.0])).endswith("score_range=[-3,150]")


def test_a_few_ratings_outside_the_scale_are_problems_of_their_clips_only(tmp_path):
    # Half the clips outside: per-clip problems, the skip hint, no diagnosis. The two are the
    # carved test split, so the hint says skipping would leave no test clips.
    corpus = scaled_corpus(tmp_path, [2.0, 3.0, 40.0, 60.0])
    assert scale_diagnosis(corpus) is None
    with pytest.raises(
        CorpusProblems, match=r"\(skipping them, data.on_error=skip, would leave no test clips"
    ) as err:
        MOSDataModule(corpus)
    assert err.value.diagnosis is None
    # Just over half: the diagnosis.
    assert scale_diagnosis(scaled_corpus(tmp_path, [2.0, 30.0, 40.0, 60.0])) is not None
    # On the right scale nothing is said.
    assert scale_diagnosis(scaled_corpus(tmp_path, [2.0, 30.0, 40.0, 60.0], (0.0, 100.0))) is None


def write_manifest(folder: Path, bad_rating: bool = False) -> Path:
    """A CSV corpus of 8 clips (train/valid/test); `bad_rating`: one listener rated 9 on 1-5."""
    rows = ["wav_path,score,system_id,sample_id,listener_id,split"]
    for i, split in enumerate(["train"] * 4 + ["valid"] * 2 + ["test"] * 2):
        tone(folder / f"c{i}.wav")
        rows.append(f"c{i}.wav,{1 + i % 4},s{i % 2},c{i},l1,{split}")
    if bad_rating:
        rows += ["c0.wav,9,s0,c0,l2,train", "c0.wav,-5,s0,c0,l3,train"]  # mean 1.67: inside
    (folder / "m.csv").write_text("\n".join(rows) + "\n")
    return folder / "m.csv"


def compose_csv(manifest: Path, *overrides: str):
    from hydra import compose, initialize_config_dir

    from tests.conftest import REPO

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose(
            "train", overrides=["data=csv", f"data.corpus.path={manifest}", "data.num_workers=0", *overrides]
        )


def test_raise_mode_writes_data_problems_and_keeps_the_report_readable(tmp_path):
    from sqa.training.run import run

    cfg = compose_csv(write_manifest(tmp_path, bad_rating=True))
    with pytest.raises(CorpusProblems) as err:
        run(cfg, tmp_path / "run")
    report = (tmp_path / "run" / "data_problems.txt").read_text()
    assert report == format_report(err.value.problems) + "\n"
    assert report.splitlines()[1] == (
        f"  {tmp_path / 'c0.wav'} [c0]: rating(s) 9.0 by 'l2', -5.0 by 'l3' outside the scale "
        "[1.0, 5.0] (data.corpus.score_range)"
    )
    assert str(err.value).startswith(report.rstrip("\n") + "\n(set data.on_error=skip")
    assert err.value.__notes__ == [f"(this report is also in {tmp_path / 'run' / 'data_problems.txt'})"]


@pytest.mark.slow
def test_train_py_prints_the_report_as_text_on_stderr(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    manifest = write_manifest(tmp_path, bad_rating=True)
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "train.py", "data=csv", f"data.corpus.path={manifest}", f"hydra.run.dir={run_dir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert "Error: 1 problem(s) in the corpus:" in lines
    assert any(line.startswith(f"  {tmp_path / 'c0.wav'} [c0]: rating(s) 9.0") for line in lines)
    assert f"(this report is also in {run_dir / 'data_problems.txt'})" in lines
    assert "Traceback" not in result.stderr and "CorpusProblems(" not in result.stderr
    assert (run_dir / "data_problems.txt").is_file()


def no_decoding(*args, **kwargs):
    raise AssertionError("audio was decoded before the configuration was checked")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.batch_size=abc", "batch_size must be a positive integer, got 'abc'"),
        ("data.batch_size=0", "batch_size must be a positive integer, got 0"),
        ("data.eval_batch_size=2.5", "eval_batch_size must be a positive integer, got 2.5"),
        ("data.num_workers=-1", "num_workers must be an integer >= 0, got -1"),
        (
            "data.max_train_seconds=-1",
            "max_train_seconds must be a positive number of seconds or null, got -1",
        ),
        ("data.max_batch_seconds=0", "max_batch_seconds must be a positive number of seconds or null, got 0"),
        ("data.preload=yes", "preload must be true, false or 'auto', got 'yes'"),
        ("data.on_error=ignore", "on_error must be 'raise' or 'skip', got 'ignore'"),
        ("data.train_domains=[nope]", r"train_domains \['nope'\] not in the corpus \['default'\]"),
        ("data.corpus.score_range=[5,1]", r"score_range must be \[low, high\] with low < high"),
    ],
)
def test_config_errors_surface_before_any_audio_is_decoded(tmp_path, monkeypatch, override, message):
    from sqa.training.run import build

    monkeypatch.setattr("sqa.data.audio.load_audio", no_decoding)
    cfg = compose_csv(write_manifest(tmp_path), override)
    with pytest.raises(Exception, match=message):
        build(cfg)


def test_a_missing_backbone_checkpoint_surfaces_before_the_corpus_is_read(tmp_path, monkeypatch):
    from sqa.training.run import build

    monkeypatch.setattr("sqa.data.audio.load_audio", no_decoding)
    missing = tmp_path / "wav2vec_vox_new.pt"
    cfg = compose_csv(
        write_manifest(tmp_path), "model/backbone=tiny_wav2vec2", f"model.backbone.checkpoint={missing}"
    )
    with pytest.raises(FileNotFoundError, match=f"model.backbone.checkpoint: {missing} does not exist"):
        build(cfg)
    cfg = compose_csv(
        tmp_path / "absent.csv", "model/backbone=transformers", f"model.backbone.path={missing}"
    )
    with pytest.raises(FileNotFoundError, match="model.backbone.path"):
        build(cfg)
    cfg = compose_csv(tmp_path / "absent.csv", f"init_from={{checkpoint: {missing}, modules: [head]}}")
    with pytest.raises(FileNotFoundError, match=f"init_from.checkpoint: {missing} does not exist"):
        build(cfg)


@pytest.mark.slow
def test_skip_mode_writes_data_problems_and_trains_on_the_rest(tmp_path):
    from sqa.training.run import run

    overrides = [
        "data.on_error=skip",
        "trainer.max_steps=1",
        "trainer.val_check_interval=1",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        "bootstrap=0",
    ]
    cfg = compose_csv(write_manifest(tmp_path, bad_rating=True), *overrides)
    run(cfg, tmp_path / "run")
    report = (tmp_path / "run" / "data_problems.txt").read_text()
    assert report.startswith("1 problem(s) in the corpus:\n") and "[c0]: rating(s) 9.0 by 'l2'" in report
    assert json.loads((tmp_path / "run" / "run_info.json").read_text())["corpus_clips"] == 7
