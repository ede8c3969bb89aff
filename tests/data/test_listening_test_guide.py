"""docs/listening-test.md's four commands, run as printed on a tiny webMUSHRA study.

The study is test_webmushra.py's: laid out as webMUSHRA leaves it (configs/study.yaml, its audio,
results/singing_study/mushra.csv). Every ```sh block of the guide's section runs in order from the
study folder, in a shell, as a reader would run it with sqa's virtual environment active.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.data.test_webmushra import write_audio, write_config, write_results, write_tone

GUIDE = REPO / "docs" / "listening-test.md"
HEADING = "## From the study to scores: four commands"
# The first step trains as printed, plus these overrides, appended so that the test takes
# seconds: a few steps, no worker processes, no bootstrap intervals of the test metrics.
QUICK_TRAINING = (
    " data.num_workers=0 data.batch_size=4 optim=adam trainer.max_steps=6"
    " trainer.val_check_interval=3 trainer.enable_progress_bar=false"
    " early_stopping_patience=null bootstrap=0"
)


def guide_blocks(kind: str) -> list[str]:
    """The ```<kind> blocks of the guide's section, in order, continuation lines joined."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    section = text[start : end if end != -1 else len(text)]
    blocks = re.findall(rf"^```{kind}\n(.*?)^```$", section, flags=re.S | re.M)
    return [b.replace("\\\n", " ").strip() for b in blocks]


def as_run_here(command: str) -> str:
    """`command` with the page's placeholders for this checkout: its train.py and interpreter."""
    command = command.replace("/path/to/sqa/", f"{REPO}/")
    if command.startswith("python "):
        command = f"{sys.executable} " + command[len("python ") :]
    return command


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_the_guides_commands_take_a_webmushra_study_to_a_predictor_a_comparison_rankings_and_new_scores(
    tmp_path,
):
    pytest.importorskip("distillmos")
    study = tmp_path / "webMUSHRA"
    write_config(study)
    write_audio(study)
    write_results(study)
    # Two new systems singing the same three phrases, a folder each, as step 4 lays them out.
    for system, noise in (("svs_a", 0.03), ("svs_b", 0.2)):
        for phrase in range(3):
            write_tone(
                study / "new_systems" / system / f"phrase{phrase + 1}.wav", 200.0 + 30 * phrase, noise, 1.0
            )
    (recipe,) = guide_blocks("yaml")
    (study / "bench.yaml").write_text(recipe + "\n", encoding="utf-8")

    commands = guide_blocks("sh")
    assert len(commands) == 4
    assert commands[0].startswith("python /path/to/sqa/train.py data=webmushra")
    commands[0] += QUICK_TRAINING
    env = {
        **os.environ,
        # sqa's virtual environment active: its python, sqa-bench and sqa-score first on PATH.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
    }
    seconds = []
    for command in commands:
        began = time.perf_counter()
        done = subprocess.run(
            as_run_here(command), shell=True, cwd=study, env=env, capture_output=True, text=True, timeout=600
        )
        seconds.append(time.perf_counter() - began)
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    print("seconds per step:", ", ".join(f"{s:.1f}" for s in seconds))

    # 1: the trained predictor, and the test clips it was scored on.
    run = study / "runs" / "study"
    assert (run / "export" / "model.pt").is_file()
    tested = read_csv(run / "predictions.csv")
    test_clips = [r for r in tested if r["test_set"] == "test"]
    assert test_clips and {r["system_id"] for r in test_clips} <= {"C1", "C2", "C3"}

    # 2: Distill-MOS's row on the same test clips.
    bench = read_csv(study / "runs" / "bench" / "bench.csv")
    rows = {r["predictor"]: r for r in bench}
    assert set(rows) == {"constant", "distillmos", "study"}
    assert rows["distillmos"]["kind"] == "zero-shot"
    # The trained predictor's row: in-corpus, on its test trials, as step 1 tested it.
    assert rows["study"]["kind"] == "in-corpus"
    printed = json.loads((run / "metrics.json").read_text(encoding="utf-8"))["avg"]["utt"]["srcc"]
    assert float(rows["study"]["utt_srcc"]) == pytest.approx(printed, abs=5e-4)

    # 3: the study's systems ranked, each with its interval, beside the listeners' scores.
    scores = read_csv(study / "scores.csv")
    assert len(scores) == len(tested) and all(r["score"] and r["mos"] for r in scores)
    ranked = read_csv(study / "scores.systems.csv")
    assert {r["system_id"] for r in ranked} == {r["system_id"] for r in tested}
    assert all(float(r["lo"]) <= float(r["score"]) <= float(r["hi"]) for r in ranked)
    assert [float(r["score"]) for r in ranked] == sorted((float(r["score"]) for r in ranked), reverse=True)

    # 4: a score for every new clip, and the new systems ranked.
    new = read_csv(study / "new.csv")
    assert len(new) == 6 and all(math.isfinite(float(r["score"])) for r in new)
    assert {r["system_id"] for r in read_csv(study / "new.systems.csv")} == {"svs_a", "svs_b"}
