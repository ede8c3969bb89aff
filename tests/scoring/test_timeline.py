"""Timelines: frame scores over time, their windows, files written by `sqa-score --timeline`, localisation."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import soundfile as sf

import sqa
from benchmarks.timeline import KINDS, localisation
from sqa.core.ownership import MANIFEST, OwnershipError
from sqa.data.vocal import vocal_activity
from sqa.scoring import cli as score
from sqa.scoring.timeline import (
    Timeline,
    build_timeline,
    check_timeline_folder,
    clip_timeline,
    csv_text,
    plot_timeline,
    safe_stems,
    write_timeline,
)
from tests.scoring.test_scoring import sung_phrase


@pytest.mark.filterwarnings("ignore::sqa.scoring.scorer.ChunkWarning")
def test_the_pooled_masked_mean_score_is_the_mean_of_the_timelines_frames(default_export):
    model = sqa.load(default_export)
    assert model.predictor.pooling == "masked_mean"
    clip = sung_phrase(3.3)
    timeline = model.timeline(clip, 16000)
    # 3.3 s at 16 kHz: (52800 - 400) // 320 + 1 frames of 20 ms.
    assert timeline.frame_scores.shape == (164,)
    assert timeline.frame_scores.mean() == pytest.approx(model.score(clip, 16000), abs=1e-6)
    # Chunked, the frames are those the chunked score averages.
    chunked = sqa.load(default_export, chunk_seconds=1.0)
    assert chunked.timeline(clip, 16000).frame_scores.mean() == pytest.approx(
        chunked.score(clip, 16000), abs=1e-6
    )


def test_windows_average_their_frames_cover_the_clip_and_mark_non_vocal_ones():
    frames = np.arange(10, dtype=np.float64)
    vocal = np.array([True] * 6 + [False] * 4)
    timeline = build_timeline(frames, vocal, 0.02, window=4, hop=4)
    # Starts 0, 4, then 8 so that the last frames are covered; the last window stops at the end.
    assert timeline.start_s.tolist() == pytest.approx([0.0, 0.08, 0.16])
    assert timeline.end_s.tolist() == pytest.approx([0.08, 0.16, 0.2])
    assert timeline.score.tolist() == [1.5, 5.5, 8.5]
    # A window is vocal when at least half of its frames are.
    assert timeline.vocal.tolist() == [True, True, False]
    assert timeline.lowest() == pytest.approx((0.0, 0.08))
    # A clip shorter than one window has one window over all of it.
    short = build_timeline(frames[:3], vocal[:3], 0.02, window=50, hop=25)
    assert short.score.tolist() == [1.0] and short.end_s.tolist() == pytest.approx([0.06])


def test_window_and_hop_default_to_one_and_a_half_seconds_and_are_checked(default_export):
    model = sqa.load(default_export)
    timeline = model.timeline(sung_phrase(3.0), 16000)
    assert (timeline.end_s[0], timeline.start_s[1]) == pytest.approx((1.0, 0.5))
    custom = model.timeline(sung_phrase(3.0), 16000, window_seconds=2.0, hop_seconds=1.0)
    assert (custom.end_s[0], custom.start_s[1]) == pytest.approx((2.0, 1.0))
    with pytest.raises(ValueError, match="window_seconds must be a positive"):
        model.timeline(sung_phrase(1.0), 16000, window_seconds=0)
    # The silence after the phrase is shaded as not vocal.
    padded = np.concatenate([sung_phrase(2.0), np.zeros(32000, dtype=np.float32)])
    flags = model.timeline(padded, 16000).vocal
    assert flags[0] and not flags[-1]


def three_windows(scores: list[float]) -> Timeline:
    """A 2 s clip's windows [0, 1), [0.5, 1.5), [1, 1.98) with `scores`, the middle one not vocal."""
    return Timeline(
        frame_seconds=0.02,
        frame_scores=np.zeros(99),
        start_s=np.array([0.0, 0.5, 1.0]),
        end_s=np.array([1.0, 1.5, 1.98]),
        score=np.array(scores),
        vocal=np.array([True, False, True]),
    )


def saved_figures(monkeypatch: pytest.MonkeyPatch) -> list:
    """The matplotlib figures saved from now on, in order (each is still saved)."""
    from matplotlib.figure import Figure

    figures = []
    save = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda figure, *a, **k: (figures.append(figure), save(figure, *a, **k))
    )
    return figures


def test_rows_the_lowest_window_and_the_csv_of_a_hand_made_timeline():
    timeline = three_windows([3.25, 2.5, 2.5])
    assert timeline.rows() == [
        {"start_s": 0.0, "end_s": 1.0, "score": 3.25, "vocal": True, "silent": False},
        {"start_s": 0.5, "end_s": 1.5, "score": 2.5, "vocal": False, "silent": False},
        {"start_s": 1.0, "end_s": 1.98, "score": 2.5, "vocal": True, "silent": False},
    ]
    assert all(type(value) is bool for value in (row["vocal"] for row in timeline.rows()))
    # The first of the two lowest windows, not the first window.
    assert timeline.lowest() == (0.5, 1.5)
    # Seconds to 2 decimals, scores whole (repr), flags in lower case, one \n per line.
    assert csv_text(timeline) == (
        "start_s,end_s,score,vocal,silent\n0.00,1.00,3.25,true,false\n0.50,1.50,2.5,false,false\n"
        "1.00,1.98,2.5,true,false\n"
    )


def test_the_plot_draws_window_scores_at_their_centres_and_shades_only_non_vocal_windows(
    tmp_path, monkeypatch
):
    drawn = saved_figures(monkeypatch)
    timeline = three_windows([3.25, 2.5, 2.0])
    plot_timeline(timeline, "one.wav", tmp_path / "one.png", (1.0, 5.0))
    (figure,) = drawn
    (axes,) = figure.axes
    (line,) = axes.lines
    assert line.get_xdata().tolist() == [0.5, 1.0, 1.49] and line.get_ydata().tolist() == [3.25, 2.5, 2.0]
    assert (line.get_marker(), line.get_label(), line.get_color()) == (".", "window score", "tab:blue")
    # One shaded span, over the one non-vocal window, behind the line.
    (span,) = axes.patches
    assert span.get_x() == 0.5 and span.get_width() == 1.0 and span.get_zorder() < line.get_zorder()
    assert span.get_facecolor() == (0.85, 0.85, 0.85, 1.0) and span.get_linewidth() == 0
    assert axes.get_xlim() == (0.0, 1.98) and axes.get_ylim() == (1.0, 5.0)
    assert (axes.get_title(), axes.get_xlabel(), axes.get_ylabel()) == ("one.wav", "time (s)", "score")
    assert [text.get_text() for text in axes.texts] == ["shaded: not vocal; blank: silence"]
    # An 800 x 300 PNG: its width and height are the IHDR chunk's first two big-endian words.
    header = (tmp_path / "one.png").read_bytes()[16:24]
    assert (int.from_bytes(header[:4], "big"), int.from_bytes(header[4:], "big")) == (800, 300)


def test_safe_stems_are_distinct_and_hold_no_path_characters():
    stems = safe_stems(["a/song 1.wav", "b/song 1.wav", "c/SONG 1.flac", "../..wav", "x/évé$.wav"])
    # Names that others share take the end of their path that tells them apart.
    assert stems == ["a_song_1", "b_song_1", "SONG_1", "clip", "v"]
    deep = safe_stems(["s/alto/take1.wav", "t/alto/take1.wav", "s/bass/take1.wav", "s/bass/take2.wav"])
    assert deep == ["s_alto_take1", "t_alto_take1", "bass_take1", "take2"]
    # Only dots and underscores are trimmed from the ends.
    assert safe_stems(["XyloX.wav", "_a_.wav", "a.wav", "A.wav", "a.flac"]) == [
        "XyloX",
        "a",
        "a-2",
        "A-3",
        "a-4",
    ]


def test_windows_start_every_hop_and_one_more_only_where_the_hop_misses_the_end():
    def starts(total: int, window: int, hop: int) -> list[int]:
        timeline = build_timeline(np.arange(total, dtype=float), np.ones(total, dtype=bool), 1.0, window, hop)
        assert timeline.end_s[-1] == total and (timeline.end_s - timeline.start_s <= window).all()
        return timeline.start_s.astype(int).tolist()

    assert starts(3, 4, 1) == [0]  # a clip shorter than a window: one window
    assert starts(8, 4, 1) == [0, 1, 2, 3, 4]
    assert starts(8, 4, 4) == [0, 4]  # the hop lands on the end: no empty window after it
    assert starts(9, 4, 4) == [0, 4, 8]


def test_window_and_hop_round_to_whole_frames_of_at_least_one():
    frames, wav = np.arange(10, dtype=float), np.full(3200, 0.1, dtype=np.float32)
    # 20 ms frames: 0.01 s rounds to no frame, so one; 0.05 s to 2 (round half to even), 0.07 s to 4.
    one = clip_timeline(frames, wav, 16000, 320, window_seconds=0.01, hop_seconds=0.01)
    assert one.score.tolist() == frames.tolist()
    wide = clip_timeline(frames, wav, 16000, 320, window_seconds=0.07, hop_seconds=0.05)
    assert wide.start_s.tolist() == pytest.approx([0.0, 0.04, 0.08, 0.12])
    with pytest.raises(ValueError, match="^hop_seconds must be a positive number of seconds, got 0$"):
        clip_timeline(frames, wav, 16000, 320, hop_seconds=0)


def test_a_users_file_in_the_timeline_folder_is_refused_and_never_replaced(tmp_path, monkeypatch):
    folder = tmp_path / "timelines"
    folder.mkdir()
    (folder / "one.png").write_text("mine")
    # one.csv is free, but one.png is the user's: still refused, naming it.
    assert check_timeline_folder(folder, ["one", "two"], overwrite=True) == (
        f"{folder / 'one.png'}: exists and was not written by sqa; choose another --timeline folder"
    )
    timeline = build_timeline(np.ones(4), np.ones(4, dtype=bool), 0.02, window=2, hop=2)
    for name in ("one.csv", "one.png"):
        (folder / name).write_text("mine")
        with pytest.raises(FileExistsError):
            write_timeline(folder, "one", timeline, "one.wav", (1.0, 5.0), overwrite=False)
        assert (folder / name).read_text() == "mine"
        (folder / name).unlink()
    drawn = saved_figures(monkeypatch)
    write_timeline(folder, "two", timeline, "two.wav", (1.0, 5.0), overwrite=False)
    assert (folder / "two.csv").read_text() == csv_text(timeline)
    assert [figure.axes[0].get_title() for figure in drawn] == ["two.wav"]


def test_a_timeline_folder_with_a_stray_record_is_refused_and_the_record_kept(tmp_path):
    folder = tmp_path / "timelines"
    folder.mkdir()
    (folder / MANIFEST).write_text("the user's\n")
    reason = check_timeline_folder(folder, ["one"], overwrite=True)
    assert reason.startswith(f"{folder}: holds {MANIFEST}, which is not a record sqa wrote")
    timeline = build_timeline(np.ones(4), np.ones(4, dtype=bool), 0.02, window=2, hop=2)
    with pytest.raises(OwnershipError):
        write_timeline(folder, "one", timeline, "one.wav", (1.0, 5.0), overwrite=False)
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST]
    assert (folder / MANIFEST).read_text() == "the user's\n"
    (folder / MANIFEST).unlink()
    write_timeline(folder, "one", timeline, "one.wav", (1.0, 5.0), overwrite=False)
    assert check_timeline_folder(folder, ["two"], overwrite=True) is None


def test_timeline_option_writes_a_csv_and_a_png_per_clip_and_never_a_users_file(
    default_export, tmp_path, capsys
):
    for name in ("one", "two"):
        sf.write(tmp_path / f"{name}.wav", sung_phrase(2.0), 16000)
    folder = tmp_path / "timelines"
    args = ["--checkpoint", str(default_export), "--num-workers", "0", "--timeline", str(folder)]
    clips = [str(tmp_path / "one.wav"), str(tmp_path / "two.wav")]
    assert score.main([*args, *clips]) == 0
    lines = (folder / "one.csv").read_text().splitlines()
    # 2 s: 99 frames, windows starting at 0, 0.5 and 1 s (the last ending with the clip at 1.98 s).
    assert lines[0] == "start_s,end_s,score,vocal,silent" and len(lines) == 1 + 3
    assert lines[-1].startswith("1.00,1.98,")
    assert (folder / "two.png").read_bytes()[:4] == b"\x89PNG"
    # Written again only with --overwrite, and a file sqa did not write is never replaced.
    assert score.main([*args, *clips]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert score.main([*args, "--overwrite", *clips]) == 0
    (folder / "three.csv").write_text("mine")
    sf.write(tmp_path / "three.wav", sung_phrase(1.0), 16000)
    assert score.main([*args, "--overwrite", str(tmp_path / "three.wav")]) == 2
    assert "was not written by sqa" in capsys.readouterr().err
    assert (folder / "three.csv").read_text() == "mine"
    assert score.main([*args[:4], "--window-seconds", "0", *clips]) == 2


# 50 songs of 10 s, a 1.5 s segment degraded (noise burst, detune, band limit in turn): the lowest
# of the 1 s windows (0.5 s hop) should overlap it in at least 90 % of them; a window drawn at
# random overlaps it in 26 % (the baseline, measured by `localisation` and checked here).
HIT_RATE = 0.9


@pytest.mark.slow
def test_the_lowest_window_finds_an_injected_degradation(synthetic_root, tmp_path):
    from sqa.training.run import run
    from tests.training.test_selection import compose_train

    overrides = [
        "data=synthetic",
        f"data.corpus.root={synthetic_root}",
        "data.num_workers=0",
        # Every frame's score regressed to its clip's MOS, where the clip loss constrains only their
        # mean: a noise burst's windows drop more (noise 12 % -> 71 %, docs/scoring.md#timelines).
        "loss=frame_margin_l1",
        # Each frame's offset from the 12-tone grid: a log-mel front end this small does not hear a
        # 60-cent detune (47 %, chance), the intonation branch does once it sees 14 clips per system.
        "model.pitch=intonation",
        "trainer.max_steps=600",
        "trainer.val_check_interval=50",
        "trainer.enable_progress_bar=false",
        "early_stopping_patience=null",
        "bootstrap=20",
    ]
    run(compose_train(overrides), tmp_path / "run")
    result = localisation(sqa.load(tmp_path / "run"), songs=50)
    assert 0.2 < result["baseline"] < 0.35
    assert set(result["by_kind"]) == set(KINDS)
    assert result["rate"] >= HIT_RATE, result


def test_a_plot_without_matplotlib_names_the_feature_and_the_extra(tmp_path, monkeypatch):
    from sqa.core.extras import MissingExtraError

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    timeline = build_timeline(np.ones(4), np.ones(4, dtype=bool), 0.02, window=2, hop=2)
    with pytest.raises(MissingExtraError) as error:
        plot_timeline(timeline, "one.wav", tmp_path / "one.png", (1.0, 5.0))
    assert str(error.value) == (
        "sqa-score --timeline's plots needs the Python package 'matplotlib', which is not installed: "
        "pip install 'sqa[all]' (or `bash scripts/setup.sh`, which installs every extra)"
    )
    assert not (tmp_path / "one.png").exists()


def test_windows_of_digital_silence_get_no_score_and_are_left_blank(default_export, tmp_path, monkeypatch):
    """A silent intro (3 s of zeros) before 2 s of singing: its windows have no score, not a made-up one."""
    model = sqa.load(default_export)
    wav = np.concatenate([np.zeros(48000, dtype=np.float32), sung_phrase(2.0).astype(np.float32)])
    timeline = model.timeline(wav, 16000)
    silent = timeline.silence()
    # Windows of 1 s every 0.5 s: those within the first 3 s are silence, from 2.5 s on they hold singing.
    assert silent.tolist() == [start + 1.0 <= 3.0 for start in timeline.start_s]
    assert np.isnan(timeline.score[silent]).all() and np.isfinite(timeline.score[~silent]).all()
    assert timeline.lowest()[0] >= 2.5  # the lowest window is one with a score
    rows = csv_text(timeline).splitlines()
    assert rows[1].split(",")[2:] == ["", "false", "true"]
    # A window with one sample above -80 dBFS is no silence: its frames are scored as they are.
    wav[16000] = 2e-4
    assert not model.timeline(wav, 16000).silence()[1]
    # Silence throughout: no window to name as the lowest.
    with pytest.raises(ValueError, match="every window is digital silence"):
        model.timeline(np.zeros(32000, dtype=np.float32), 16000).lowest()
    # The plot: silent windows are neither shaded nor drawn.
    figures = saved_figures(monkeypatch)
    plot_timeline(timeline, "intro", tmp_path / "t.png", (1.0, 5.0))
    (axes,) = figures[0].axes
    assert len(axes.patches) == int((~timeline.vocal & ~silent).sum())
    drawn = axes.lines[0].get_ydata()
    assert np.isnan(drawn[silent]).all()


@pytest.fixture
def forward_calls(monkeypatch) -> list[int]:
    """The batch size of every forward pass of a MOSPredictor while the test runs."""
    from sqa.models.predictor import MOSPredictor

    calls: list[int] = []
    forward = MOSPredictor.forward

    def counted(self, wav, *args, **kwargs):
        calls.append(wav.shape[0])
        return forward(self, wav, *args, **kwargs)

    monkeypatch.setattr(MOSPredictor, "forward", counted)
    return calls


@pytest.mark.filterwarnings("ignore::sqa.scoring.scorer.ChunkWarning")
@pytest.mark.parametrize("chunk", [None, "1"])
def test_sqa_score_timelines_reuse_the_scoring_pass_and_equal_a_separate_pass(
    default_export, tmp_path, forward_calls, chunk
):
    clips = [tmp_path / "one.wav", tmp_path / "two.wav"]
    sf.write(clips[0], sung_phrase(2.0), 16000)
    sf.write(clips[1], sung_phrase(3.3, seed=1), 16000)
    chunking = ["--chunk-seconds", chunk] if chunk else []
    folder = tmp_path / "timelines"
    args = ["--checkpoint", str(default_export), "--num-workers", "0", "--timeline", str(folder), *chunking]
    assert score.main([*args, "--output", str(tmp_path / "s.csv"), *map(str, clips)]) == 0
    # One pass per piece of each clip (a whole clip, or its 1 s windows), none for the timelines.
    model = sqa.load(default_export, chunk_seconds=float(chunk) if chunk else None)
    assert len(forward_calls) == sum(len(model.prepare(sf.read(c, dtype="float32")[0])) for c in clips)
    assert len(forward_calls) == (9 if chunk else 2)
    for clip in clips:
        # The separate pass over the whole clip, as timelines were made before.
        wav, _ = sf.read(clip, dtype="float32")
        before = clip_timeline(model.frame_scores(wav), wav, 16000, 320)
        assert (folder / f"{clip.stem}.csv").read_text() == csv_text(before) == csv_text(model.timeline(clip))


def test_a_vocal_only_timeline_lays_out_the_scored_spans_frames_in_one_pass(
    default_export, tmp_path, forward_calls
):
    """2 s of digital silence, 2 s of singing, 1 s of a noise floor: only the singing is scored."""
    rng = np.random.default_rng(0)
    tail = (0.001 * rng.standard_normal(16000)).astype(np.float32)
    wav = np.concatenate([np.zeros(32000, dtype=np.float32), sung_phrase(2.0), tail])
    sf.write(tmp_path / "song.wav", wav, 16000)
    folder = tmp_path / "timelines"
    args = [
        "--checkpoint",
        str(default_export),
        "--num-workers",
        "0",
        "--vocal-only",
        "--timeline",
        str(folder),
    ]
    assert score.main([*args, "--output", str(tmp_path / "s.csv"), str(tmp_path / "song.wav")]) == 0
    assert len(forward_calls) == 1
    # The file as it is read (16-bit samples).
    wav, _ = sf.read(tmp_path / "song.wav", dtype="float32")
    model = sqa.load(default_export, vocal_only=True)
    timeline = model.timeline(tmp_path / "song.wav")
    assert (folder / "song.csv").read_text() == csv_text(timeline)
    # The scored frames are the vocal span's, from a separate pass over the span alone, at its place.
    start, stop = vocal_activity(wav, 16000).span(wav.shape[0])
    assert start % 320 == 0 and 32000 <= start < 33000 and 64000 <= stop < 66000
    span = sqa.load(default_export).frame_scores(wav[start:stop])
    first = start // 320
    np.testing.assert_array_equal(timeline.frame_scores[first : first + span.size], span)
    assert (
        np.isnan(timeline.frame_scores[:first]).all()
        and np.isnan(timeline.frame_scores[first + span.size :]).all()
    )
    # With the default masked mean, the score is the mean of the timeline's scored frames.
    scored = float(np.genfromtxt(tmp_path / "s.csv", delimiter=",", names=True)["score"])
    assert scored == pytest.approx(float(np.nanmean(timeline.frame_scores)), abs=1e-6)
    assert scored == pytest.approx(model.score(tmp_path / "song.wav"), abs=1e-9)
    # Windows of the silent intro are silence; those of the noise floor, left out, have no score.
    rows = timeline.rows()
    assert [r["silent"] for r in rows[:3]] == [True, True, True]
    assert rows[-1]["score"] is None and not rows[-1]["silent"] and not rows[-1]["vocal"]
    assert all(r["score"] is not None for r in rows if r["start_s"] >= 2.5 and r["end_s"] <= 3.9)
    assert 2.0 <= timeline.lowest()[0] < 4.0
    # A clip without a vocal span has no scored window at all.
    noise = model.timeline(tail, 16000)
    assert np.isnan(noise.score).all()
    with pytest.raises(ValueError, match="every window is digital silence or left out of the score"):
        noise.lowest()
