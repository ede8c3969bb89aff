"""Hostile inputs beside exports: audio, outputs, run directories, recorded corpora and the CLIs.

Each test is a case an attacker (or an accident) tried: it used to end in a traceback, an
unbounded allocation, a write outside the named folder or a lost result.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.core import artefacts, run_folder
from sqa.core.artefacts import spreadsheet_safe
from sqa.data.audio import MAX_AUDIO_SAMPLES, AudioError, load_audio
from sqa.data.corpus import CorpusError
from sqa.data.readers import read_csv_manifest, recorded_corpus
from sqa.data.valid_split import read_valid_split
from sqa.exports import importers
from sqa.reports import compare, results
from sqa.reports.plots import safe_file_name, write_test_plots
from sqa.scoring import cli as score
from sqa.scoring import outputs as score_outputs
from sqa.scoring.scorer import Scorer
from sqa.training import run_dir
from tests.reports.test_results import write_run

from .conftest import REPO

# Address space of a scoring subprocess: importing torch and sqa maps about 4.6 GB.
MEMORY_LIMIT = 6 << 30


def good_clip(folder: Path, name: str = "sys0-utt000.wav") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    sf.write(folder / name, 0.1 * np.random.default_rng(0).standard_normal(8000), 16000, subtype="FLOAT")
    return folder / name


def flac_declaring(path: Path, frames: int) -> Path:
    """A one-second FLAC whose STREAMINFO header declares `frames` frames."""
    sf.write(path, np.zeros(16000), 16000, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    # STREAMINFO (after "fLaC" and a 4-byte block header): 10 bytes of block and frame sizes,
    # then 20 bits rate, 3 bits channels, 5 bits depth and the 36-bit total sample count.
    fields = int.from_bytes(data[18:26], "big")
    fields = (fields & ~((1 << 36) - 1)) | frames
    data[18:26] = fields.to_bytes(8, "big")
    path.write_bytes(bytes(data))
    assert sf.info(str(path)).frames == frames
    return path


def test_over_limit_audio_is_refused_from_its_header_and_the_rest_is_scored_under_a_memory_limit(
    default_export, tmp_path
):
    good = good_clip(tmp_path)
    one_hz = tmp_path / "one_hz.wav"
    sf.write(
        one_hz, np.zeros(150_000, dtype=np.float32), 1, subtype="FLOAT"
    )  # 600 KB, 2.4e9 samples at 16 kHz
    eight_hours = flac_declaring(tmp_path / "eight_hours.flac", 8 * 3600 * 16000)
    out = tmp_path / "s.csv"
    code = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))\n"
        "from sqa.scoring import cli as score\n"
        "sys.exit(score.main(sys.argv[1:]))\n"
    )
    args = [
        "--checkpoint",
        str(default_export),
        "--output",
        str(out),
        "--num-workers",
        "0",
        "--device",
        "cpu",
    ]
    done = subprocess.run(
        [sys.executable, "-c", code, *args, str(one_hz), str(good), str(eight_hours)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert f"{one_hz}: 150000 frames x 1 channels at 1 Hz" in done.stderr
    assert f"{eight_hours}: 460800000 frames" in done.stderr
    assert f"exceeds the limit of {MAX_AUDIO_SAMPLES} samples" in done.stderr
    rows = list(csv.DictReader(out.open()))
    assert [r["path"] for r in rows] == [str(good)]


def test_the_sample_limit_is_configurable_and_exact(default_export, tmp_path, capsys):
    good = good_clip(tmp_path)  # 8000 frames, mono, at the model's rate
    out = tmp_path / "s.csv"
    assert (
        score.main(
            ["--checkpoint", str(default_export), "--output", str(out), "--max-samples", "7999", str(good)]
        )
        == 1
    )
    assert "exceeds the limit of 7999 samples" in capsys.readouterr().err
    assert (
        score.main(
            ["--checkpoint", str(default_export), "--output", str(out), "--max-samples", "8000", str(good)]
        )
        == 0
    )
    with pytest.raises(AudioError, match="exceeds the limit of 7999"):
        load_audio(good, 16000, max_samples=7999)
    assert load_audio(good, 16000, max_samples=8000).shape == (8000,)
    with pytest.raises(AudioError, match="16000 samples decoded or resampled"):
        load_audio(good, 32000, max_samples=15999)  # resampling doubles it


@pytest.mark.parametrize("rate", [0, -16000, 384_001, 10**15])
def test_score_refuses_absurd_rates(rate, default_export):
    with pytest.raises(ValueError, match="sample_rate must be an integer in 1..384000"):
        Scorer(default_export).score(np.zeros(1600, dtype=np.float32), rate)


def test_score_accepts_the_highest_rate_and_bounds_the_resampled_size(default_export):
    scorer = Scorer(default_export)
    noise = 0.1 * np.random.default_rng(0).standard_normal(38400).astype(np.float32)
    assert 1.0 <= scorer.score(noise, 384_000) <= 5.0
    small = Scorer(default_export, max_samples=10_000)
    with pytest.raises(AudioError, match=r"audio: 1000 frames x 1 channels at 1000 Hz \(16000 samples"):
        small.score(np.zeros(1000, dtype=np.float32), 1000)


def test_formula_cells_are_quoted_and_numbers_kept():
    assert spreadsheet_safe('=HYPERLINK("http://x","y")') == '\'=HYPERLINK("http://x","y")'
    assert [spreadsheet_safe(v) for v in ("+cmd", "-2+3", "@SUM(A1)", "\tx", "\r=1")] == [
        "'+cmd",
        "'-2+3",
        "'@SUM(A1)",
        "'\tx",
        "'\r=1",
    ]
    assert [spreadsheet_safe(v) for v in ("-0.5", "+1", "-1e-3", "plain", "a=b", "", -0.5)] == [
        "-0.5",
        "+1",
        "-1e-3",
        "plain",
        "a=b",
        "",
        -0.5,
    ]


def test_manifest_formulas_are_neutralised_in_the_output_csv_not_the_json(default_export, tmp_path):
    good = good_clip(tmp_path)
    manifest = tmp_path / "m.csv"
    with manifest.open("w", newline="") as fh:
        csv.writer(fh).writerows(
            [
                ["wav_path", "singer", "offset", "note"],
                [good.name, '=HYPERLINK("http://x","y")', "-0.5", "@x"],
            ]
        )
    out = tmp_path / "s.csv"
    assert score.main(["--checkpoint", str(default_export), "--output", str(out), str(manifest)]) == 0
    (row,) = csv.DictReader(out.open())
    assert (
        row["singer"] == '\'=HYPERLINK("http://x","y")' and row["note"] == "'@x" and row["offset"] == "-0.5"
    )
    assert not row["score"].startswith("'")
    as_json = tmp_path / "s.json"
    assert score.main(["--checkpoint", str(default_export), "--output", str(as_json), str(manifest)]) == 0
    assert json.loads(as_json.read_text())[0]["singer"] == '=HYPERLINK("http://x","y")'


def test_of_two_writers_to_one_new_output_only_one_wins(default_export, tmp_path, capsys, monkeypatch):
    good = good_clip(tmp_path)
    out = tmp_path / "s.csv"
    text = score_outputs.table_text

    def other_writer_first(rows, output):
        out.write_text("the other run's scores\n")  # written after the check, before this write
        return text(rows, output)

    monkeypatch.setattr(score_outputs, "table_text", other_writer_first)
    assert score.main(["--checkpoint", str(default_export), "--output", str(out), str(good)]) == 1
    err = capsys.readouterr().err
    assert f"{out}: not written (it appeared while scoring); the scores were saved to " in err
    assert out.read_text() == "the other run's scores\n"
    kept = Path(err.split("the scores were saved to ")[1].split("\n")[0])
    saved = kept.read_text(encoding="utf-8")
    assert saved.startswith("path,score\n") and str(good) in saved
    kept.unlink()
    # With --overwrite the run replaces what it finds, as asked.
    assert (
        score.main(["--checkpoint", str(default_export), "--output", str(out), "--overwrite", str(good)]) == 0
    )
    assert out.read_text().startswith("path,score\n")


def test_a_failing_final_write_keeps_the_scores_and_names_them(default_export, tmp_path, capsys, monkeypatch):
    good = good_clip(tmp_path)
    out = tmp_path / "s.csv"

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(score_outputs, "atomic_write_text", refuse)
    assert score.main(["--checkpoint", str(default_export), "--output", str(out), str(good)]) == 1
    err = capsys.readouterr().err
    assert (
        "Traceback" not in err and f"{out}: not written (Permission denied); the scores were saved to " in err
    )
    kept = Path(err.split("the scores were saved to ")[1].split("\n")[0])
    assert str(good) in kept.read_text(encoding="utf-8") and not out.exists()
    kept.unlink()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc, a folder no one can write into")
def test_an_unwritable_output_folder_is_refused_before_scoring(default_export, tmp_path, capsys, monkeypatch):
    good = good_clip(tmp_path)
    monkeypatch.setattr(
        "sqa.scoring.scorer.Scorer.score_files", lambda *a: pytest.fail("scored before the check")
    )
    assert (
        score.main(["--checkpoint", str(default_export), "--output", "/proc/sqa-scores.csv", str(good)]) == 2
    )
    assert "/proc/sqa-scores.csv: the folder /proc is not writable" in capsys.readouterr().err


@pytest.mark.parametrize("name", [run_folder.LOCK_NAME, run_folder.LOG_NAME])
def test_a_symlinked_run_directory_file_is_refused_and_its_target_untouched(name, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / name).symlink_to(target)
    with pytest.raises(run_folder.RunDirError, match=f"{name}: is a symbolic link"):
        if name == run_folder.LOCK_NAME:
            with run_folder.lock(folder):
                pass
        else:
            with run_dir.log_to_file(folder):
                pass
    assert target.read_text() == "keep me\n"


def test_run_directory_files_are_still_written_when_plain(tmp_path):
    with run_folder.lock(tmp_path), run_dir.log_to_file(tmp_path):
        import logging

        logging.getLogger("sqa").info("hello")
    assert str(os.getpid()) in (tmp_path / run_folder.LOCK_NAME).read_text()
    assert "hello" in (tmp_path / run_folder.LOG_NAME).read_text()


def test_a_recorded_synthetic_corpus_is_never_generated(synthetic_root, tmp_path):
    spec = {
        "_target_": "sqa.data.synthetic.load_synthetic",
        "root": str(tmp_path / "foreign"),
        "clips_per_system": 10**6,
    }
    with pytest.raises(CorpusError, match="recorded corpus folder .* does not exist"):
        recorded_corpus(spec, "config.yaml")
    assert not (tmp_path / "foreign").exists()
    # Even where the folder exists (empty), nothing is generated in it; the recorded flag is overridden.
    (tmp_path / "foreign").mkdir()
    with pytest.raises(CorpusError, match="synthetic.json"):
        recorded_corpus({**spec, "allow_generate": True}, "config.yaml")
    assert list((tmp_path / "foreign").iterdir()) == []
    existing = {"_target_": "sqa.data.synthetic.load_synthetic", "root": str(synthetic_root)}
    assert len(recorded_corpus(existing, "config.yaml").test_sets()) == 3
    # The MUSHRA-style corpus is not generated either: neither its audio nor its manifest.
    mushra = {"_target_": "sqa.data.synthetic.load_synthetic_mushra", "root": str(tmp_path / "foreign")}
    with pytest.raises(CorpusError, match="foreign/audio: no synthetic corpus there"):
        recorded_corpus({**mushra, "allow_generate": True}, "config.yaml")
    shutil.copytree(synthetic_root, tmp_path / "foreign" / "audio")
    with pytest.raises(CorpusError, match="mushra.csv: no MUSHRA-style manifest there"):
        recorded_corpus(mushra, "config.yaml")
    assert sorted(p.name for p in (tmp_path / "foreign").iterdir()) == ["audio"]
    # A folder that is no synthetic corpus is named as such, never suggested for deletion; a
    # broken marker is one line too.
    (tmp_path / "plain" / "info").mkdir(parents=True)
    plain = {**existing, "root": str(tmp_path / "plain")}
    with pytest.raises(CorpusError, match=r"plain: not a corpus sqa generated \(no info/synthetic.json\)"):
        recorded_corpus(plain, "config.yaml")
    (tmp_path / "foreign" / "audio" / "info" / "synthetic.json").write_text("{broken")
    with pytest.raises(CorpusError, match=r"synthetic.json: unreadable \(Expecting property name"):
        recorded_corpus({**mushra, "root": str(tmp_path / "foreign")}, "config.yaml")


@pytest.mark.parametrize("path", ["/etc/passwd", "/etc"])
def test_a_recorded_corpus_path_must_be_a_csv_file(path):
    spec = {"_target_": "sqa.data.readers.read_csv_manifest", "path": path}
    with pytest.raises(CorpusError, match="is not a .csv file") as info:
        recorded_corpus(spec, "config.yaml")
    assert "root:" not in str(info.value)


# 10-20 s of subprocesses or scoring: with the slow tests, as the default run is at its budget.
@pytest.mark.slow
def test_eval_py_ends_in_one_line_on_a_bad_export(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "eval.py", f"export={tmp_path / 'missing'}", f"hydra.run.dir={tmp_path / 'out'}"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"Error: {tmp_path / 'missing'}: not found")


def write_manifest(path: Path, test_set: str) -> Path:
    good_clip(path.parent)
    rows = [["wav_path", "score", "system_id", "sample_id", "split", "test_set"]]
    rows.append(["sys0-utt000.wav", "3", "s0", "a", "test", test_set])
    with path.open("w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return path


@pytest.mark.parametrize("name", ["avg", "AVG", " avg"])
def test_a_test_set_named_avg_is_refused(name, tmp_path):
    with pytest.raises(CorpusError, match=f"m.csv:2: test_set {name!r} is reserved"):
        read_csv_manifest(write_manifest(tmp_path / "m.csv", name))
    assert read_csv_manifest(write_manifest(tmp_path / "n.csv", "avg2")).test_sets().keys() == {"avg2"}


def test_test_set_names_become_safe_file_names(tmp_path):
    assert safe_file_name("../../x/evil") == "_.._.._x_evil"
    assert [safe_file_name(n) for n in ("test1", "a b", ".hidden", "..", "", "é")] == [
        "test1",
        "a_b",
        "_.hidden",
        "_..",
        "_",
        "_",
    ]
    out = tmp_path / "run" / "plots"
    out.mkdir(parents=True)
    rows = [
        {"test_set": "../../x/evil", "system_id": f"s{i % 3}", "mos": 1.0 + i % 4, "pred": 1.5 + i % 3}
        for i in range(12)
    ]
    from sqa import metrics

    block = metrics.evaluate_sets(
        [r["pred"] for r in rows],
        [r["mos"] for r in rows],
        [r["system_id"] for r in rows],
        [r["test_set"] for r in rows],
    )
    written = write_test_plots(rows, block, out)
    assert sorted(p.name for p in written) == ["_.._.._x_evil_sys.png", "_.._.._x_evil_utt.png"]
    assert all(p.parent == out for p in written) and not (tmp_path / "x").exists()


def test_valid_split_csv_with_a_bom_reads_and_latin1_is_one_line(tmp_path):
    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufeffsample_id,system_id\nutt1,s1\n".encode())
    assert read_valid_split(bom) == ["utt1"]
    latin = tmp_path / "latin.csv"
    latin.write_bytes("sample_id\nJos\xe9\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"latin.csv: not UTF-8 text \(byte 0xe9 on line 2\)"):
        read_valid_split(latin)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[]", "not a metrics file (expected a mapping of test sets and 'avg')"),
        ('{"avg": {"utt": [1], "sys": {}}}', "avg.utt is not a mapping of numbers"),
        ('{"avg": {"utt": {"srcc": "x"}, "sys": {}}}', "avg.utt is not a mapping of numbers"),
        ("{", "not a metrics file"),
        ("\xff", "not a metrics file"),
    ],
)
def test_sqa_table_on_a_malformed_metrics_file_is_one_line(text, expected, tmp_path, capsys):
    write_run(tmp_path / "runs" / "a", 0.0)
    (tmp_path / "runs" / "b").mkdir()
    (tmp_path / "runs" / "b" / "metrics.json").write_bytes(text.encode("latin-1"))
    assert results.main(["--cell", f"x={tmp_path / 'runs'}/*"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err and "b/metrics.json" in err


def test_sqa_table_on_runs_with_different_test_sets_is_one_line(tmp_path, capsys):
    write_run(tmp_path / "runs" / "a", 0.0)
    block = write_run(tmp_path / "runs" / "b", 0.1)
    block.pop("test3")
    artefacts.write_metrics(tmp_path / "runs" / "b", block)
    assert results.main(["--cell", f"x={tmp_path / 'runs'}/*"]) == 1
    assert "b/metrics.json: test sets" in capsys.readouterr().err


def write_predictions(path: Path, extra_line: str = "") -> Path:
    # Kept by hand: the base of a damaged file, its broken last line appended as no writer would.
    lines = ["sample_id,system_id,test_set,mos,pred"]
    lines += [f"u{i},s{i % 3},test1,{1 + i % 4},{1.5 + i % 3}" for i in range(9)]
    path.write_text("\n".join(lines) + "\n" + extra_line, encoding="utf-8")
    return path


@pytest.mark.parametrize("line", ["u9,s0,test1\n", "u9,s0,test1,3,3,9\n", 'u9,"s0\n'])
def test_sqa_compare_on_a_short_or_broken_row_is_one_line(line, tmp_path, capsys):
    a = write_predictions(tmp_path / "a.csv")
    b = write_predictions(tmp_path / "b.csv", line)
    assert compare.main([str(a), str(b), "--resamples", "10"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "b.csv:11:" in err or "b.csv: not a CSV file" in err


def test_sqa_compare_never_writes_its_json_onto_an_input(tmp_path, capsys):
    a = write_predictions(tmp_path / "a.csv")
    b = write_predictions(tmp_path / "b.csv")
    before = b.read_text()
    with pytest.raises(SystemExit) as info:
        compare.main([str(a), str(b), "--json", str(b)])
    assert info.value.code == 2 and b.read_text() == before
    assert "is one of the inputs" in capsys.readouterr().err
    assert compare.main([str(a), str(b), "--resamples", "10", "--json", str(tmp_path / "c.json")]) == 0
    assert json.loads((tmp_path / "c.json").read_text())["metric"] == "srcc"


@pytest.mark.parametrize("content", [b"hello world\n", b"PK\x03\x04 not a zip", b""])
def test_sqa_import_of_a_file_that_is_not_weights_is_one_line(content, tmp_path, capsys):
    weights = tmp_path / "w.pt"
    weights.write_bytes(content)
    assert importers.main(["singmos_pro", str(weights), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{weights} is not a torch state_dict file" in err
    assert not (tmp_path / "out").exists()
