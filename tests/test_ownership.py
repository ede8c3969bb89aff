"""sqa removes or replaces only what it wrote: every overwrite path leaves the user's files alone.

A folder made by hand holds files with the names sqa's outputs have (config.yaml, logs/, plots/,
checkpoints/, predictions.csv) and a thesis; each command told to overwrite into it refuses,
naming a file sqa did not write, and the folder is as it was. A previous run set aside by
`overwrite=true` comes back whole when the new run stops before training (a config error, a kill).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from sqa.baselines import cli as baseline
from sqa.core import ownership, run_folder
from sqa.core.run_folder import PREVIOUS, RunDirError, claimed, discard_previous, lock, prepare
from sqa.exports import importers
from sqa.exports.format import ExportError, export_predictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.scoring import cli as score
from sqa.scoring import outputs
from tests.conftest import REPO
from tests.exports.test_import import FAIRSEQ_TINY_BASE, SingMOSv1, upstream_file
from tests.training.test_main_era import MAIN_ERA

USERS = {
    "thesis.tex": "\\chapter{Results}\n",
    "config.yaml": "mine: true\n",
    "predictions.csv": "my,own\n1,2\n",
    "logs/notes.txt": "day 1\n",
    "plots/figure.png": "not really a png\n",
    "checkpoints/keep.ckpt": "weights of mine\n",
}


def write_files(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry under `folder` with its bytes (None: a folder), but the lock a claim leaves."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
        if p.name != ".lock"
    }


@pytest.fixture
def users_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "mine"
    write_files(folder, USERS)
    return folder


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)


# The first entry sqa did not write, as the refusals name it (sorted: "checkpoints" comes first).
FIRST_FOREIGN = "holds checkpoints, which sqa did not write (and 5 more)"


@pytest.mark.slow  # a second Python process or a training (over 10 s)
def test_train_py_overwrite_leaves_a_folder_made_by_hand_untouched(users_folder, synthetic_root):
    before = snapshot(users_folder)
    done = run_cli(
        "train.py", f"hydra.run.dir={users_folder}", "overwrite=true", f"data.corpus.root={synthetic_root}"
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{users_folder}: {FIRST_FOREIGN}; overwrite=true replaces only what sqa wrote" in done.stderr
    assert "nothing was removed" in done.stderr
    assert snapshot(users_folder) == before


# 10-20 s of subprocesses or scoring: with the slow tests, as the default run is at its budget.
@pytest.mark.slow
def test_eval_py_overwrite_leaves_a_folder_made_by_hand_untouched(users_folder, default_export):
    before = snapshot(users_folder)
    done = run_cli("eval.py", f"export={default_export}", f"hydra.run.dir={users_folder}", "overwrite=true")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"{users_folder}: {FIRST_FOREIGN}; overwrite=true replaces only" in done.stderr
    assert snapshot(users_folder) == before


def test_sqa_baseline_overwrite_leaves_a_folder_made_by_hand_untouched(users_folder, capsys):
    before = snapshot(users_folder)
    assert baseline.main(["--run-dir", str(users_folder), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert err == f"sqa-baseline: {users_folder}: {FIRST_FOREIGN}; --overwrite replaces only what sqa " + (
        "wrote there (.sqa-owned.json records it); --overwrite refused, nothing was removed\n"
    )
    assert snapshot(users_folder) == before


def test_sqa_baseline_into_a_training_run_is_refused_without_overwrite(tmp_path, capsys):
    run_dir = tmp_path / "run"
    with lock(run_dir):
        prepare(run_dir, resume=False, overwrite=False)
    write_files(run_dir, {"metrics.json": "{}", "predictions.csv": "a\n", "export/model.pt": "w"})
    before = snapshot(run_dir)
    assert baseline.main(["--run-dir", str(run_dir)]) == 2
    assert capsys.readouterr().err == (
        f"sqa-baseline: {run_dir} holds a previous run's outputs (export, metrics.json, predictions.csv); "
        "start it over with --overwrite (replaces what sqa wrote there), or choose another --run-dir\n"
    )
    assert snapshot(run_dir) == before


def test_sqa_import_overwrite_never_replaces_a_folder_holding_its_input_or_a_users_file(tmp_path):
    upstream = upstream_file(tmp_path / "wav2vec_small.pt", FAIRSEQ_TINY_BASE, normalize=False)
    torch.manual_seed(4)
    out = tmp_path / "out"
    out.mkdir()
    weights = out / "singmos_v1.pt"
    torch.save(SingMOSv1(upstream, ssl_dim=256).state_dict(), weights)
    write_files(out, {"thesis.tex": USERS["thesis.tex"]})
    before = snapshot(out)
    for folder in (out, tmp_path / "out" / ".." / "out"):
        with pytest.raises(ExportError) as err:
            importers.import_predictor(
                "singmos_v1", weights, folder, upstream_checkpoint=str(upstream), overwrite=True
            )
        assert "refused, nothing was removed" in str(err.value)
    assert snapshot(out) == before
    # Once the user's file is gone, the input alone still keeps the folder.
    (out / "thesis.tex").unlink()
    ownership.record_all(out)  # even a folder that records every entry as sqa's
    with pytest.raises(ExportError, match=f"holds {weights}, an input of this command"):
        importers.import_predictor(
            "singmos_v1", weights, out, upstream_checkpoint=str(upstream), overwrite=True
        )
    assert weights.is_file()
    # An export sqa wrote is replaced.
    export = tmp_path / "export"
    importers.import_predictor("singmos_v1", weights, export, upstream_checkpoint=str(upstream))
    importers.import_predictor(
        "singmos_v1", weights, export, upstream_checkpoint=str(upstream), overwrite=True
    )
    assert (export / "model.pt").is_file() and ownership.foreign(export) == []


def test_export_overwrite_names_the_users_file_and_keeps_it(users_folder):
    before = snapshot(users_folder)
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8))
    with pytest.raises(
        ExportError, match=re.escape(f"{users_folder}: {FIRST_FOREIGN}; overwrite replaces only")
    ):
        export_predictor(model, users_folder, 16000, ["d"], overwrite=True)
    assert snapshot(users_folder) == before


def test_sqa_score_overwrite_replaces_only_its_output(users_folder, default_export, capsys):
    wav = users_folder / "clip.wav"
    sf.write(wav, 0.1 * np.random.default_rng(0).standard_normal(8000), 16000)
    before = snapshot(users_folder)
    out = users_folder / "scores.csv"
    out.write_text("an earlier score table\n")
    assert (
        score.main(["--checkpoint", str(default_export), "--output", str(out), "--overwrite", str(wav)]) == 0
    )
    assert out.read_text().startswith("path,score\n")
    assert {k: v for k, v in snapshot(users_folder).items() if k != "scores.csv"} == before
    # Its input is never its output, --overwrite or not.
    manifest = users_folder / "list.txt"
    manifest.write_text(f"{wav}\n")
    args = ["--checkpoint", str(default_export), "--output", str(manifest), "--overwrite", str(manifest)]
    assert score.main(args) == 2
    assert manifest.read_text() == f"{wav}\n"
    capsys.readouterr()


@pytest.mark.parametrize("place", ["cwd", "parent_of_cwd", "repository", "holds_an_input"])
def test_places_sqa_never_clears_even_when_it_wrote_everything_there(place, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    with lock(run_dir):
        prepare(run_dir, resume=False, overwrite=False)
    write_files(run_dir, {"metrics.json": "{}", "sub/corpus.csv": "x\n"})
    ownership.record_all(run_dir)
    inputs = []
    if place == "cwd":
        monkeypatch.chdir(run_dir)
    elif place == "parent_of_cwd":
        monkeypatch.chdir(run_dir / "sub")
    elif place == "repository":
        (run_dir / ".git").mkdir()
        ownership.record_all(run_dir)
    else:
        inputs = [run_dir / "sub" / "corpus.csv"]
    before = snapshot(run_dir)
    with pytest.raises(RunDirError, match="sqa never starts a run over there"), lock(run_dir):
        prepare(run_dir, resume=False, overwrite=True, inputs=inputs)
    assert snapshot(run_dir) == before


def test_a_run_inside_a_repository_never_clears_it(tmp_path, monkeypatch):
    repo = tmp_path / "clone"
    (repo / ".git").mkdir(parents=True)
    write_files(repo, {"checkpoints/README.md": "what goes here\n", "checkpoints/mine/model.pt": "w"})
    monkeypatch.chdir(repo)
    before = snapshot(repo)
    for name in (".", str(repo)):
        with pytest.raises(RunDirError, match="is the working directory"), lock(name):
            prepare(name, resume=False, overwrite=True)
    assert snapshot(repo) == before


@pytest.mark.slow  # a second Python process or a training (over 10 s)
@pytest.mark.parametrize("run_dir", [".", "''"])
def test_train_py_started_over_in_its_own_clone_is_refused_and_changes_nothing(run_dir, tmp_path):
    clone = tmp_path / "clone"
    (clone / ".git").mkdir(parents=True)
    write_files(clone, {"checkpoints/README.md": "what goes here\n", "checkpoints/mine/model.pt": "w"})
    before = snapshot(clone)
    done = subprocess.run(
        [sys.executable, str(REPO / "train.py"), f"hydra.run.dir={run_dir}", "overwrite=true"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1] == (
        "Error: . is the working directory or one of its parents and holds a previous run's outputs "
        "(checkpoints); sqa never starts a run over there: choose another hydra.run.dir"
    )
    assert snapshot(clone) == before


def set_aside_folders(run_dir: Path) -> list[Path]:
    """The set-aside folders (`.sqa-previous-<claim>`) in `run_dir`."""
    return sorted(run_dir.glob(f"{PREVIOUS}-*"))


def previous_run(run_dir: Path) -> dict[str, bytes | None]:
    """A finished run as sqa writes it (recorded as its own by its claim); returns its snapshot."""
    # Kept by hand: placeholder contents under a run's names, recorded by sqa's own claim; set-aside and
    # restore move entries whatever they hold (a trained run: test_a_run_started_over_replaces_...).
    with lock(run_dir):
        prepare(run_dir, resume=False, overwrite=False)
        write_files(
            run_dir,
            {
                "config.yaml": "seed: 0\n",
                "run_info.json": "{}",
                "metrics.json": '{"avg": 1}',
                "predictions.csv": "old\n",
                "checkpoints/best-step=5.ckpt": "old",
                "plots/curves.png": "old",
                "export/model.pt": "old",
                "train.log": "old log\n",
            },
        )
    return snapshot(run_dir)


@pytest.mark.slow  # a second Python process or a training (over 10 s)
def test_a_config_error_after_overwrite_puts_the_previous_run_back(tmp_path, synthetic_root):
    run_dir = tmp_path / "run"
    before = previous_run(run_dir)
    done = run_cli(
        "train.py",
        f"hydra.run.dir={run_dir}",
        "overwrite=true",
        f"data.corpus.root={synthetic_root}",
        "data.batch_size=abc",
        "trainer.max_steps=2",
    )
    assert done.returncode == 1, done.stderr[-2000:]
    after = snapshot(run_dir)
    # The failed run's own Hydra record may stay beside it (and in sqa's record); every file of
    # the previous run is back.
    assert {k: after.get(k) for k in before if k != ownership.MANIFEST} == {
        k: v for k, v in before.items() if k != ownership.MANIFEST
    }
    assert ownership.owned(run_dir) >= {name for name in before if "/" not in name} - {ownership.MANIFEST}
    assert set_aside_folders(run_dir) == []


def test_a_run_killed_before_training_is_undone_by_the_next_claim(tmp_path):
    run_dir = tmp_path / "run"
    before = previous_run(run_dir)
    script = (
        "import os, signal, sys\n"
        "from sqa.core.run_folder import lock, prepare, record_point\n"
        "with lock(sys.argv[1]):\n"
        "    prepare(sys.argv[1], resume=False, overwrite=True, remove_log=True)\n"
        "    open(os.path.join(sys.argv[1], 'config.yaml'), 'w').write('new: 1\\n')\n"
        # As a run does once it has written its config.yaml: the claim's own from then on.
        "    record_point(sys.argv[1])\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(run_dir)], cwd=REPO, timeout=120)
    assert done.returncode == -9
    assert len(set_aside_folders(run_dir)) == 1 and (run_dir / "config.yaml").read_text() == "new: 1\n"
    with lock(run_dir):
        assert snapshot(run_dir) == before
    # Started over again and this time under way: the previous run goes.
    with claimed(run_dir, resume=False, overwrite=True):
        discard_previous(run_dir)
    assert set_aside_folders(run_dir) == []
    assert not any((run_dir / name).exists() for name in ("metrics.json", "export", "checkpoints"))


def test_a_claim_that_writes_nothing_leaves_no_folder(tmp_path):
    run_dir = tmp_path / "new"
    with claimed(run_dir, resume=False, overwrite=False):
        assert run_dir.is_dir()
    assert not run_dir.exists()
    with claimed(run_dir, resume=False, overwrite=False):
        (run_dir / "metrics.json").write_text("{}")
    assert sorted(os.listdir(run_dir)) == [".lock", ownership.MANIFEST, "metrics.json"]


def test_a_score_table_written_into_a_run_is_sqas_and_one_in_a_users_folder_leaves_no_record(tmp_path):
    # The README's demo: train, score into the run directory, then train again with overwrite=true.
    run_dir = tmp_path / "run"
    previous_run(run_dir)
    assert outputs.emit([{"path": "a.wav", "score": 3.0}], run_dir / "scores.csv") is None
    with lock(run_dir):
        prepare(run_dir, resume=False, overwrite=True)
        (aside,) = set_aside_folders(run_dir)
        assert (aside / "scores.csv").is_file() and not (run_dir / "scores.csv").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    assert outputs.emit([{"path": "a.wav", "score": 3.0}], mine / "scores.csv") is None
    assert os.listdir(mine) == ["scores.csv"]


def test_a_run_started_over_replaces_the_previous_one_whole(tmp_path):
    from sqa.training.run import run
    from tests.training.test_selection import compose_train, tiny_run_overrides, write_per_system_corpus

    manifest = write_per_system_corpus(tmp_path / "corpus")
    run_dir = tmp_path / "run"
    before = previous_run(run_dir)
    overrides = [*tiny_run_overrides(manifest), "trainer.max_steps=4", "trainer.val_check_interval=2"]
    run(compose_train([*overrides, "overwrite=true"]), run_dir)
    after = snapshot(run_dir)
    # Every file of the previous run is gone or rewritten by the new one; nothing is set aside.
    assert set_aside_folders(run_dir) == []
    rewritten = [name for name, text in before.items() if text is not None and name != ownership.MANIFEST]
    assert rewritten and all(after.get(name) != before[name] for name in rewritten)
    assert "checkpoints/best-step=5.ckpt" not in after and "export/config.yaml" in after
    assert ownership.foreign(run_dir, also_mine=[".lock"]) == []


def legacy_export(folder: Path) -> Path:
    """An export as sqa wrote it before it kept records: no .sqa-owned.json."""
    export = export_predictor(MOSPredictor(LogMelBackbone(n_mels=16, channels=8)), folder, 16000, ["d"])
    (export / ownership.MANIFEST).unlink()
    return export


def test_an_export_written_before_records_is_replaced_and_a_look_alike_is_not(tmp_path):
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8))
    export = legacy_export(tmp_path / "old")
    export_predictor(model, export, 16000, ["d"], overwrite=True)
    assert ownership.foreign(export) == []
    # The same files beside one of the user's: refused, naming it.
    mine = legacy_export(tmp_path / "mine")
    (mine / "thesis.tex").write_text(USERS["thesis.tex"])
    with pytest.raises(ExportError, match="holds thesis.tex, which sqa did not write"):
        export_predictor(model, mine, 16000, ["d"], overwrite=True)
    # Files named like an export's whose config.yaml is no export's: refused.
    fake = tmp_path / "fake"
    write_files(fake, {"config.yaml": "mine: true\n", "model.pt": "weights of mine\n"})
    with pytest.raises(ExportError, match="holds config.yaml, which sqa did not write"):
        export_predictor(model, fake, 16000, ["d"], overwrite=True)
    assert (fake / "config.yaml").read_text() == "mine: true\n"


def test_a_run_directory_written_before_records_is_started_over_only_by_its_record(tmp_path):
    # A run directory as sqa wrote it before it kept records: the main-era run of tests/assets.
    run_dir = tmp_path / "run"
    shutil.copytree(MAIN_ERA, run_dir)
    (run_dir / "run_info.json").unlink()
    bare = snapshot(run_dir)
    # Without a run's run_info.json (seed and packages), files named like a run's are not sqa's.
    with pytest.raises(RunDirError, match="which sqa did not write"), lock(run_dir):
        prepare(run_dir, resume=False, overwrite=True)
    assert snapshot(run_dir) == bare
    shutil.copy(MAIN_ERA / "run_info.json", run_dir / "run_info.json")
    with lock(run_dir):
        prepare(run_dir, resume=False, overwrite=True)
    (aside,) = set_aside_folders(run_dir)
    assert sorted(os.listdir(aside)) == sorted(
        [*(name for name in bare if "/" not in name and name != "train.log"), "run_info.json"]
    )


def test_restoring_puts_back_files_folders_and_links_over_what_the_new_run_wrote(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sqa.core.set_aside")
    run_dir = tmp_path / "run"
    before = previous_run(run_dir)
    (run_dir / "plots.link").symlink_to(run_dir / "plots", target_is_directory=True)
    ownership.record_created(run_dir, before=[])
    before = snapshot(run_dir)
    with lock(run_dir):
        prepare(run_dir, resume=False, overwrite=True, remove_log=True)
        # The new run writes a file, a folder and a link under names the previous run had.
        write_files(
            run_dir, {"config.yaml": "new: 1\n", "checkpoints/last.ckpt": "new", "metrics.json": "{}"}
        )
        (run_dir / "plots.link").symlink_to(tmp_path, target_is_directory=True)
        assert run_folder.restore_previous(run_dir) is True
        assert run_folder.restore_previous(run_dir) is False  # nothing left to restore
    # Said once, naming the folder: the second call found nothing to put back.
    assert caplog.messages == [f"put the previous run's outputs back in {run_dir}"]
    assert snapshot(run_dir) == before
    assert (run_dir / "plots.link").readlink() == run_dir / "plots"
    assert sorted(os.listdir(tmp_path)) == ["run"]  # the new link's target was never followed


def test_sqa_score_never_writes_its_table_and_a_timeline_to_one_file(tmp_path, default_export, capsys):
    folder = tmp_path / "T"
    folder.mkdir()
    wav = tmp_path / "song.wav"
    sf.write(wav, 0.1 * np.random.default_rng(0).standard_normal(8000), 16000)
    table = folder / "song.csv"
    base = ["--checkpoint", str(default_export), "--timeline", str(folder)]
    for overwrite in ([], ["--overwrite"]):
        assert score.main([*base, "--output", str(table), *overwrite, str(wav)]) == 2
        assert capsys.readouterr().err == (
            f"sqa-score: {table}: is also where --timeline writes song.csv; choose another --output or "
            "--timeline folder\n"
        )
        assert os.listdir(folder) == []
    # Beside each other under other names, both are written; the score table is kept as written.
    assert score.main([*base, "--output", str(folder / "scores.csv"), str(wav)]) == 0
    assert (folder / "scores.csv").read_text().startswith("path,score\n")
    assert (folder / "song.csv").read_text().startswith("start_s,")
    capsys.readouterr()


def test_a_record_downloaded_with_an_export_proves_nothing_in_its_new_folder(tmp_path):
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8))
    theirs = export_predictor(model, tmp_path / "theirs", 16000, ["d"])
    # The author's own notes.md, recorded in the author's folder.
    (theirs / "notes.md").write_text("the author's\n")
    ownership.record(theirs, ["notes.md"])
    download = tmp_path / "download"
    shutil.copytree(theirs, download)
    (download / "notes.md").write_text("the user's own notes\n")
    with pytest.raises(ExportError, match=f"holds {ownership.MANIFEST}, which is not a record sqa wrote"):
        export_predictor(model, download, 16000, ["d"], overwrite=True)
    assert (download / "notes.md").read_text() == "the user's own notes\n"
    # Without the copied record the export's own files count as sqa's (by their names), the user's not.
    (download / ownership.MANIFEST).unlink()
    with pytest.raises(ExportError, match="holds notes.md, which sqa did not write"):
        export_predictor(model, download, 16000, ["d"], overwrite=True)
    assert (download / "notes.md").read_text() == "the user's own notes\n"
    # In the folder it was written for, the record holds: the author's export is replaced whole.
    export_predictor(model, theirs, 16000, ["d"], overwrite=True)
    assert not (theirs / "notes.md").exists()


def test_an_export_killed_in_a_run_leaves_a_folder_the_runs_overwrite_replaces(tmp_path, monkeypatch):
    from sqa.core import atomic

    run_dir = tmp_path / "run"
    previous_run(run_dir)
    shutil.rmtree(run_dir / "export")  # a run killed before its first export
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8))

    class Killed(BaseException):
        """Where the process died: nothing after runs (the temporary folder stays)."""

    def killed(*args: object, **kwargs: object) -> None:
        raise Killed

    monkeypatch.setattr(atomic.shutil, "rmtree", lambda *a, **k: None)
    monkeypatch.setattr(torch, "save", killed)
    # Outside a claim: a killed run's claim never ends, so only the record made at once counts.
    with pytest.raises(Killed):
        export_predictor(model, run_dir / "export", 16000, ["d"], overwrite=True)
    monkeypatch.undo()
    (leftover,) = run_dir.glob(".export.sqa-new-*")
    assert leftover.name in ownership.owned(run_dir)
    with claimed(run_dir, resume=False, overwrite=True):
        discard_previous(run_dir)
    # train.log stays for the new run's logging to append to (`prepare`'s remove_log).
    assert sorted(os.listdir(run_dir)) == [".lock", ownership.MANIFEST, "train.log"]
