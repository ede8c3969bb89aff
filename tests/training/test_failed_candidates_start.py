"""A run of candidates that fails before training leaves nothing that refuses the corrected command."""

from __future__ import annotations

from pathlib import Path

import pytest

from sqa.core.run_folder import claimed
from sqa.training import plan as plans
from sqa.training.run import run
from tests.training.test_candidates import overrides, write_corpus

# The second candidate fails when its model is built: after the first one's folder is written.
BAD = ("+candidates.models.bad=['model.head_dim=-1']", "candidates.use=[constant,bad]")
FIXED = ("candidates.use=[constant]",)


def tree(folder: Path) -> list[str]:
    """Every path under `folder`, relative to it, sorted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("existed", [True, False])
def test_a_candidate_that_fails_to_build_leaves_no_candidates_folder_and_the_fix_runs(tmp_path, existed):
    manifest = write_corpus(tmp_path / "corpus", False)
    run_dir = tmp_path / "run"
    if existed:
        run_dir.mkdir()
    line = overrides(manifest, *BAD)
    with pytest.raises(Exception, match="negative dimension"):
        run(plans.compose_train(line), run_dir, line)
    if existed:
        # The folder stays, with what every run writes again; no output folder in it.
        assert not (run_dir / "candidates").exists()
        assert set(tree(run_dir)) <= {".lock", ".sqa-owned.json", "train.log", "config.yaml", "run_info.json"}
    else:
        assert not run_dir.exists()
    # The corrected command, without overwrite=true.
    line = overrides(manifest, *FIXED)
    run(plans.compose_train(line), run_dir, line)
    assert (run_dir / "candidates" / "constant" / "checkpoints" / "last.ckpt").is_file()
    assert (run_dir / "export" / "model.pt").is_file()


def fail_after(run_dir: Path, make) -> None:
    """Claim `run_dir`, let `make` write into it, then fail."""
    with pytest.raises(RuntimeError, match="failed"), claimed(run_dir, resume=False, overwrite=False):
        make(run_dir)
        raise RuntimeError("failed before training")


def prepared(run_dir: Path, name: str = "a") -> Path:
    """A candidate's folder as preparing it writes it: its configuration, record and splits."""
    folder = run_dir / "candidates" / name
    folder.mkdir(parents=True)
    for file in ("config.yaml", "run_info.json", "valid_split.csv", "test_split.csv", ".sqa-owned.json"):
        (folder / file).write_text("x\n")
    return folder


def test_a_failed_claim_removes_output_folders_that_hold_only_what_preparing_writes(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    fail_after(run_dir, lambda d: (prepared(d, "a"), prepared(d, "b"), (d / "candidates" / "c").mkdir()))
    assert not (run_dir / "candidates").exists()
    # The next command is not refused as a previous run's.
    with claimed(run_dir, resume=False, overwrite=False):
        pass


@pytest.mark.parametrize(
    "extra",
    [
        "checkpoints/last.ckpt",  # training had begun
        "logs/version_0/metrics.csv",  # a logger's files
        "notes.txt",  # a file of the user's
    ],
)
def test_a_failed_claim_keeps_an_output_folder_that_holds_anything_else(tmp_path, extra):
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def make(folder: Path) -> None:
        target = prepared(folder, "b") / extra
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("mine\n")
        prepared(folder, "a")

    fail_after(run_dir, make)
    assert (run_dir / "candidates" / "b" / extra).read_text() == "mine\n"
    assert (run_dir / "candidates" / "a" / "config.yaml").is_file()


def test_a_link_in_a_prepared_folder_keeps_it_and_its_target(tmp_path):
    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run_dir.mkdir()
    elsewhere.mkdir()
    (elsewhere / "config.yaml").write_text("the user's\n")
    fail_after(run_dir, lambda d: prepared(d).joinpath("linked").symlink_to(elsewhere))
    assert (run_dir / "candidates" / "a" / "linked").is_symlink()
    assert (elsewhere / "config.yaml").read_text() == "the user's\n"


def test_only_a_failed_block_and_only_what_it_made_is_removed(tmp_path):
    # A block that ends well keeps its prepared folders (the run goes on from them).
    done = tmp_path / "done"
    with claimed(done, resume=False, overwrite=False):
        prepared(done)
    assert (done / "candidates" / "a" / "config.yaml").is_file()
    # A folder there before the claim (a resumed run's) stays, however the block ends.
    fail_after(done, lambda d: None)
    assert (done / "candidates" / "a" / "config.yaml").is_file()
