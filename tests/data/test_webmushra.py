"""A webMUSHRA study read as webMUSHRA leaves it: configs/<name>.yaml, its audio, results/<testId>/*.csv.

The files are laid out and written as webMUSHRA's startup.js and service/write.php do: pages in
`random` blocks, paths relative to the folder webMUSHRA runs from, a finish-page questionnaire
whose fields stand between session_test_id and session_uuid, PHP's fputcsv quoting, one block of
rows appended per session, and the generated anchor35 rated like any condition.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from sqa.data.corpus import ROLE_ANCHOR, ROLE_REFERENCE, CorpusError
from sqa.data.readers import read_webmushra, recorded_corpus
from sqa.data.validate import validate_corpus
from sqa.training.evaluation import evaluate
from tests.conftest import REPO
from tests.training.test_eval import assert_same, compose_eval

TEST_ID = "singing_study"
CONDITIONS = ("C1", "C2", "C3", "C4")
# Six trials, one sung phrase each: trial1 first, then two `random` blocks, as in webMUSHRA's
# default.yaml (a first page, then a block whose pages each session sees in its own order).
TRIALS = ("trial1", "trial2", "trial3", "trial4", "trial5", "trial6")
BLOCKS = (("trial1",), ("random", "trial2", "trial3", "trial4"), ("random", "trial5", "trial6"))
# Each condition's usual rating, and each session's leniency, so that means are known by hand.
TYPICAL = {"reference": 96, "C1": 80, "C2": 61, "C3": 42, "C4": 15}
SESSIONS = {
    "4a1e0f55-8c0b-4b7e-9d6c-0a5f3f0c2b11": ("anna@example.org", "31", -3),
    "b7d2c9e4-1f3a-4c55-8e2d-6b9a0c7d5e22": ("Ben, M.", "45", 0),
    "e9c8b7a6-5d4e-4f3a-9b2c-1d0e9f8a7b33": ("", "27", 6),
}
REVISITING = "b7d2c9e4-1f3a-4c55-8e2d-6b9a0c7d5e22"
QUESTIONNAIRE = ("email", "age")
MUSHRA_HEADER = (
    "session_test_id",
    *QUESTIONNAIRE,
    "session_uuid",
    "trial_id",
    "rating_stimulus",
    "rating_score",
    "rating_time",
    "rating_comment",
)


def fputcsv(fields: list[str]) -> str:
    """A row as PHP's fputcsv writes it: a field with a space, comma, quote or backslash is quoted."""
    out = []
    for field in fields:
        if any(ch in field for ch in ' ,"\\\t\r\n'):
            field = '"' + field.replace('"', '""') + '"'
        out.append(field)
    return ",".join(out) + "\n"


def write_tone(path: Path, frequency: float, noise: float, seconds: float) -> None:
    """A short sung-like tone at 16 kHz: a partial or two plus noise (more noise, worse condition)."""
    rng = np.random.default_rng(int(frequency * 10 + noise * 1000))
    t = np.arange(int(seconds * 16000)) / 16000
    wav = 0.3 * np.sin(2 * np.pi * frequency * t) + 0.1 * np.sin(4 * np.pi * frequency * t)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, (wav + noise * rng.standard_normal(t.size)).astype(np.float32), 16000)


def audio_path(trial: str, key: str) -> str:
    """Where the config names a stimulus: relative to the webMUSHRA folder, as its examples do."""
    return f"configs/resources/audio/{trial}/{key.lower()}.wav"


def mushra_page(trial: str, anchor35: bool = False) -> str:
    """One MUSHRA page of the config YAML (indented for a list item), a reference and four conditions."""
    stimuli = "".join(f"          {k}: {audio_path(trial, k)}\n" for k in CONDITIONS)
    return (
        f"    - type: mushra\n"
        f"      id: {trial}\n"
        f"      name: Sung phrase {trial[-1]}\n"
        f"      content: Rate the basic audio quality of each condition against the reference.\n"
        f"      showWaveform: true\n"
        f"      enableLooping: true\n"
        f"      reference: {audio_path(trial, 'reference')}\n"
        f"      createAnchor35: {'true' if anchor35 else 'false'}\n"
        f"      createAnchor70: false\n"
        f"      stimuli:\n{stimuli}"
    )


def write_config(root: Path, name: str = "study") -> Path:
    """configs/<name>.yaml of the study: a welcome page, the trials in `BLOCKS`, a finish questionnaire."""
    lines = [
        "testname: Singing voice synthesis quality",
        f"testId: {TEST_ID}",
        "bufferSize: 2048",
        "stopOnErrors: true",
        "showButtonPreviousPage: true",
        "remoteService: service/write.php",
        "",
        "pages:",
        "    - type: generic",
        "      id: first_page",
        "      name: Welcome",
        "      content: Welcome to the listening test.",
    ]
    text = "\n".join(lines) + "\n"
    for block in BLOCKS:
        pages = [t for t in block if t != "random"]
        if block[0] != "random":
            text += "".join(mushra_page(t, anchor35=t == "trial1") for t in pages)
            continue
        # A random block: a nested list whose first element is the string `random`.
        text += "    -\n          - random\n"
        for trial in pages:
            text += "".join(f"      {line}\n" for line in mushra_page(trial).splitlines())
    text += (
        "    - type: finish\n"
        "      name: Thank you\n"
        "      content: Thank you for attending!\n"
        "      showResults: true\n"
        "      writeResults: true\n"
        "      questionnaire:\n"
        "          - type: text\n"
        "            label: eMail\n"
        "            name: email\n"
        "          - type: number\n"
        "            label: Age\n"
        "            name: age\n"
        "            min: 0\n"
        "            max: 100\n"
        "            default: 30\n"
    )
    config = root / "configs" / f"{name}.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text, encoding="utf-8")
    return config


def write_audio(root: Path) -> None:
    """Every file the config names: one phrase per trial, conditions noisier down the list."""
    noise = {"reference": 0.0, "C1": 0.02, "C2": 0.06, "C3": 0.15, "C4": 0.4}
    for i, trial in enumerate(TRIALS):
        for key, level in noise.items():
            # Unequal lengths, some longer than a training crop would be, as real phrases are.
            write_tone(root / audio_path(trial, key), 180.0 + 40 * i, level, 0.8 + 0.1 * i)


def rating(session: str, trial: str, key: str) -> int:
    """A session's rating of a condition: its usual rating, the session's leniency, the trial's."""
    return min(100, max(0, TYPICAL[key] + SESSIONS[session][2] + TRIALS.index(trial)))


def mushra_rows(session: str, order: list[str]) -> list[list[str]]:
    """The rows write.php appends for one session that saw the trials in `order`."""
    email, age, _ = SESSIONS[session]
    rows = []
    for trial in order:
        # The page stores its sliders in the shuffled order it showed them, anchors among them.
        keys = ["C3", "reference", "C1", "C4", "C2"] + (["anchor35"] if trial == "trial1" else [])
        for key in keys:
            score = "7" if key == "anchor35" else str(rating(session, trial, key))
            rows.append([TEST_ID, email, age, session, trial, key, score, "48213", ""])
    return rows


def write_results(root: Path, extra: list[list[str]] = ()) -> Path:
    """results/<testId>/mushra.csv: the header once, then each session's block as it was sent."""
    orders = [list(TRIALS), ["trial1", "trial4", "trial2", "trial3", "trial6", "trial5"], list(TRIALS)]
    text = fputcsv(list(MUSHRA_HEADER))
    for session, order in zip(SESSIONS, orders, strict=True):
        rows = mushra_rows(session, order)
        if session == REVISITING:
            # This listener's trial3 C1 comes twice, at 70 and 90 (a comment with a comma: quoted).
            rows = [r for r in rows if r[4:6] != ["trial3", "C1"]]
            rows += [[TEST_ID, "Ben, M.", "45", session, "trial3", "C1", "70", "9120", ""]]
            rows += [[TEST_ID, "Ben, M.", "45", session, "trial3", "C1", "90", "9120", "too bright, thin"]]
        text += "".join(fputcsv(r) for r in rows)
    text += "".join(fputcsv(r) for r in extra)
    results = root / "results" / TEST_ID / "mushra.csv"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(text, encoding="utf-8")
    return results


@pytest.fixture
def study(tmp_path: Path) -> tuple[Path, Path]:
    """(results CSV, config YAML) of the study in a webMUSHRA folder under tmp_path."""
    root = tmp_path / "webMUSHRA"
    config = write_config(root)
    write_audio(root)
    return write_results(root), config


def test_every_trial_and_condition_is_a_clip_with_its_audio_score_role_and_trial(study, caplog):
    results, config = study
    with caplog.at_level(logging.INFO):
        corpus = read_webmushra(results, config)
    root = config.parent.parent
    clips = {c.sample_id: c for c in corpus.clips}
    # Six trials of a reference and four conditions; anchor35 has no file and is left out.
    assert sorted(clips) == sorted(f"{t}/{k}" for t in TRIALS for k in ("reference", *CONDITIONS))
    assert "3 rating(s) of the anchors webMUSHRA generates (anchor35, anchor70) left out" in caplog.text
    assert corpus.score_range == (0.0, 100.0)
    c2 = clips["trial5/C2"]
    # 61 + (-3, 0, 6) + 4 over three sessions: (62 + 65 + 71) / 3.
    assert c2.mos == pytest.approx(66.0)
    assert c2.path == root / "configs/resources/audio/trial5/c2.wav" and c2.path.is_file()
    assert (c2.system_id, c2.song, c2.role, c2.split) == ("C2", "trial5", None, "train")
    assert c2.ratings == {s: 61 + SESSIONS[s][2] + 4 for s in SESSIONS}
    reference = clips["trial2/reference"]
    assert reference.role == ROLE_REFERENCE and reference.system_id == "reference"
    assert reference.path == root / "configs/resources/audio/trial2/reference.wav"
    # 96 + (-3, 0, 6) + 1, the last one capped at 100, as webMUSHRA's slider is.
    assert reference.mos == pytest.approx((94 + 97 + 100) / 3)
    # The session with two rows of trial3's C1 counts once, with their mean: not (79+70+90+88) / 4.
    c1 = clips["trial3/C1"]
    assert c1.ratings[REVISITING] == 80 and c1.mos == pytest.approx((79 + 80 + 88) / 3)
    assert not [p for c in corpus.clips for p in validate_corpus(corpus, 16000, 400) if p.sample_id]


def test_anchor_keys_named_in_the_settings_are_anchors_on_every_page(study):
    results, config = study
    corpus = read_webmushra(results, config, anchors=["C4"])
    roles = {c.sample_id: c.role for c in corpus.clips}
    assert all(roles[f"{t}/C4"] == ROLE_ANCHOR for t in TRIALS)
    assert {roles[f"{t}/C1"] for t in TRIALS} == {None}
    with pytest.raises(
        CorpusError, match=r"data.corpus.anchors names \['C9'\], which no rated page of .*study"
    ):
        read_webmushra(results, config, anchors=["C9"])


def test_a_stimulus_missing_from_the_config_names_the_results_line_the_trial_and_the_config(study):
    results, config = study
    write_results(config.parent.parent, extra=[[TEST_ID, "", "30", "f00", "trial4", "C9", "50", "1", ""]])
    lines = results.read_text(encoding="utf-8").count("\n")
    with pytest.raises(CorpusError) as err:
        read_webmushra(results, config)
    assert str(err.value) == (
        f"line {lines} of {results}: stimulus 'C9' of trial 'trial4' is not in that page of {config} "
        "(its stimuli: ['C1', 'C2', 'C3', 'C4', 'reference'])"
    )


def test_a_trial_missing_from_the_config_or_another_tests_results_are_errors(study):
    results, config = study
    root = config.parent.parent
    write_results(root, extra=[[TEST_ID, "", "30", "f00", "trial7", "C1", "50", "1", ""]])
    with pytest.raises(CorpusError, match=rf"of {results}: trial 'trial7' is no rated page of {config}"):
        read_webmushra(results, config)
    write_results(root, extra=[["pilot", "", "30", "f00", "trial1", "C1", "50", "1", ""]])
    with pytest.raises(
        CorpusError, match=rf"session_test_id 'pilot' is not the testId '{TEST_ID}' of {config}"
    ):
        read_webmushra(results, config)


def test_a_generated_anchor_of_a_page_that_does_not_generate_it_is_an_unknown_stimulus(study):
    results, config = study
    write_results(
        config.parent.parent, extra=[[TEST_ID, "", "30", "f00", "trial2", "anchor35", "5", "1", ""]]
    )
    with pytest.raises(CorpusError, match="stimulus 'anchor35' of trial 'trial2' is not in that page"):
        read_webmushra(results, config)


def test_missing_audio_is_reported_as_every_corpus_reports_it(study):
    results, config = study
    (config.parent / "resources/audio/trial6/c3.wav").unlink()
    corpus = read_webmushra(results, config)
    problems = [p for p in validate_corpus(corpus, 16000, 400) if p.sample_id]
    assert [str(p) for p in problems] == [
        f"{config.parent / 'resources/audio/trial6/c3.wav'} [trial6/C3]: audio file not found"
    ]


def test_the_root_defaults_to_the_folder_above_configs_and_relative_paths_read_from_a_given_root(
    study, tmp_path
):
    results, config = study
    root = config.parent.parent
    given = read_webmushra("results/singing_study/mushra.csv", "configs/study.yaml", root=root)
    assert [c.path for c in given.clips] == [c.path for c in read_webmushra(results, config).clips]
    moved = tmp_path / "elsewhere.yaml"
    moved.write_text(config.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(
        CorpusError, match="elsewhere.yaml: not inside a configs/ folder.*set data.corpus.root"
    ):
        read_webmushra(results, moved)
    assert read_webmushra(results, moved, root=root).clips[0].path.is_file()


def likert_study(
    root: Path, kind: str, header: list[str], rows: list[list[str]], response: str
) -> tuple[Path, Path]:
    """A study of one Likert page of `kind` on trial1's audio, and its results file as write.php names it."""
    write_audio(root)
    stimuli = "".join(f"          {k}: {audio_path('trial1', k)}\n" for k in ("C1", "C2", "C3"))
    config = root / "configs" / "likert.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f"testname: Likert\ntestId: likert_test\nbufferSize: 2048\nremoteService: service/write.php\n\n"
        f"pages:\n    - type: {kind}\n      id: lk1\n      name: likert\n      content: Rate the quality.\n"
        f"      stimuli:\n{stimuli}      response:\n{response}"
        "    - type: finish\n      name: Thank you\n      content: Thanks\n      writeResults: true\n",
        encoding="utf-8",
    )
    name = {"likert_single_stimulus": "lss.csv", "likert_multi_stimulus": "lms.csv"}.get(kind, f"{kind}.csv")
    results = root / "results" / "likert_test" / name
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text("".join(fputcsv(r) for r in [header, *rows]), encoding="utf-8")
    return results, config


ACR = "".join(
    f"        - value: {v}\n          label: {v.title()}\n"
    for v in ("bad", "poor", "fair", "good", "excellent")
)


def test_likert_single_stimulus_ratings_score_the_position_of_their_response_value(tmp_path):
    header = ["session_test_id", "trial_id", "stimuli_rating", "stimuli", "rating_time"]
    rows = [
        ["likert_test", "lk1", "good", "C1", "3000"],
        ["likert_test", "lk1", "poor", "C2", "3000"],
        ["likert_test", "lk1", "NA", "C3", "3000"],
        ["likert_test", "lk1", "excellent", "C1", "2000"],
        ["likert_test", "lk1", "fair", "C3", "2000"],
    ]
    results, config = likert_study(tmp_path, "likert_single_stimulus", header, rows, ACR)
    corpus = read_webmushra(results, config)
    assert corpus.score_range == (1.0, 5.0)
    # good = 4, excellent = 5; an unanswered scale (NA) is no rating; lss.csv names no session.
    assert {c.sample_id: c.mos for c in corpus.clips} == {"lk1/C1": 4.5, "lk1/C2": 2.0, "lk1/C3": 3.0}
    assert all(not c.ratings and c.song == "lk1" and c.role is None for c in corpus.clips)


def test_likert_multi_stimulus_values_are_read_without_the_spaces_write_php_adds_and_numbers_as_numbers(
    tmp_path,
):
    header = ["session_test_id", "trial_id", "stimuli_rating", "stimuli", "rating_time"]
    rows = [["likert_test", "lk1", " 1 ", "C1", "10"], ["likert_test", "lk1", " 3 ", "C1", "10"]]
    rows += [["likert_test", "lk1", " 2 ", "C2", "10"], ["likert_test", "lk1", " 0 ", "C3", "10"]]
    scale = "".join(f"        - value: {v}\n          label: L{v}\n" for v in range(4))
    results, config = likert_study(tmp_path, "likert_multi_stimulus", header, rows, scale)
    corpus = read_webmushra(results, config)
    assert corpus.score_range == (0.0, 3.0)
    assert {c.sample_id: c.mos for c in corpus.clips} == {"lk1/C1": 2.0, "lk1/C2": 2.0, "lk1/C3": 0.0}


def test_a_likert_page_of_several_scales_is_read_on_the_scale_chosen(tmp_path):
    header = ["session_test_id", "trial_id", "stimuli_rating1", "stimuli_rating2", "stimuli", "rating_time"]
    rows = [
        ["likert_test", "lk1", "poor", "yes", "C1", "10"],
        ["likert_test", "lk1", "good", "no", "C2", "10"],
    ]
    two = f"        -\n{ACR.replace('        ', '          ')}        -\n"
    two += "          - value: yes\n            label: Yes\n          - value: no\n            label: No\n"
    results, config = likert_study(tmp_path, "likert_single_stimulus", header, rows, two)
    with pytest.raises(
        CorpusError, match=r"stimuli_rating1, stimuli_rating2\); choose one with data.corpus.lik"
    ):
        read_webmushra(results, config)
    first = read_webmushra(results, config, likert_scale=1)
    assert {c.sample_id: c.mos for c in first.clips} == {"lk1/C1": 2.0, "lk1/C2": 4.0}
    # js-yaml, which webMUSHRA reads its config with, reads yes and no as text, not as booleans.
    second = read_webmushra(results, config, likert_scale=2)
    assert second.score_range == (1.0, 2.0)
    assert {c.sample_id: c.mos for c in second.clips} == {"lk1/C1": 1.0, "lk1/C2": 2.0}
    assert not [c.problems for c in second.clips if c.problems]


# The headers write.php gives the answers of these page types (no questionnaire).
REFUSED_HEADERS = {
    "paired_comparison": ["session_test_id", "trial_id", "choice_reference", "choice_non_reference"]
    + ["choice_answer", "choice_time", "choice_comment"],
    "bs1116": ["session_test_id", "trial_id", "rating_reference", "rating_non_reference"]
    + ["rating_reference_score", "rating_non_reference_score", "rating_time", "choice_comment"],
}


@pytest.mark.parametrize(("kind", "header"), REFUSED_HEADERS.items())
def test_page_types_without_a_rating_of_one_stimulus_are_refused_by_name(tmp_path, kind, header):
    row = ["likert_test", "lk1", "reference", "C1", "3", "2", "1200", ""][: len(header)]
    results, config = likert_study(tmp_path, kind, header, [row], ACR)
    with pytest.raises(
        CorpusError, match=rf"trial 'lk1' is a {kind} page of .*likert.yaml, whose answers are"
    ):
        read_webmushra(results, config)


def test_results_of_another_page_type_than_the_trials_name_the_file_webmushra_writes_them_to(study):
    results, config = study
    lss = results.with_name("lss.csv")
    lss.write_text(
        fputcsv(["session_test_id", "trial_id", "stimuli_rating", "stimuli", "rating_time"])
        + fputcsv([TEST_ID, "trial1", "good", "C1", "10"]),
        encoding="utf-8",
    )
    with pytest.raises(
        CorpusError, match=r"lacks the column\(s\) \['session_uuid', 'rating_stimulus', 'rating_sc"
    ):
        read_webmushra(lss, config)


def test_a_study_trains_with_train_py_and_its_validation_and_test_are_carved_by_trial(study, tmp_path):
    results, config = study
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "train.py",
            "data=webmushra",
            f"data.corpus.results={results}",
            f"data.corpus.config={config}",
            "data.corpus.anchors=[C4]",
            "data.num_workers=0",
            "data.batch_size=4",
            "optim=adam",
            "trainer.max_steps=6",
            "trainer.val_check_interval=3",
            "trainer.enable_progress_bar=false",
            "early_stopping_patience=null",
            "bootstrap=0",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trials = {}
    for name in ("valid_split.csv", "test_split.csv"):
        with (run_dir / name).open(encoding="utf-8", newline="") as fh:
            clips = {row["sample_id"] for row in csv.DictReader(fh)}
        trials[name] = {i.split("/")[0] for i in clips}
        # Whole trials moved: every condition of a carved trial, none of another.
        assert clips == {f"{t}/{k}" for t in trials[name] for k in ("reference", *CONDITIONS)}
    assert trials["valid_split.csv"] and trials["test_split.csv"]
    assert not trials["valid_split.csv"] & trials["test_split.csv"]
    assert set(TRIALS) - trials["valid_split.csv"] - trials["test_split.csv"]
    assert (run_dir / "export" / "model.pt").is_file()
    # The export records the study: the folder webMUSHRA ran from, relative to the export, and
    # the results and config in it. Moved together, the export tests again on its test trials.
    recorded = yaml.safe_load((run_dir / "export" / "config.yaml").read_text())["data"]["corpus"]
    root = results.parents[2]
    assert recorded["_target_"] == "sqa.data.readers.read_webmushra"
    assert recorded["results"] == str(results.relative_to(root))
    assert recorded["config"] == str(config.relative_to(root))
    assert (run_dir / "export" / recorded["root"]).resolve() == root.resolve()
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path, moved, ignore=shutil.ignore_patterns("moved"))
    shutil.rmtree(root)
    evaluate(compose_eval([f"export={moved / 'run' / 'export'}"]), moved / "eval")
    # As written (undefined metrics null, with their reasons).
    assert_same(
        json.loads((moved / "eval" / "metrics.json").read_text()),
        json.loads((run_dir / "metrics.json").read_text()),
    )


@pytest.mark.parametrize(
    ("key", "value"), [("results", "configs/study.yaml"), ("config", "results/singing_study/missing.yaml")]
)
def test_a_recorded_study_must_name_its_results_csv_and_config_yaml(study, key, value):
    results, config = study
    root = results.parents[2]
    spec = {
        "_target_": "sqa.data.readers.read_webmushra",
        "results": str(results.relative_to(root)),
        "config": str(config.relative_to(root)),
        "root": ".",
        key: value,
    }
    with pytest.raises(CorpusError, match=rf"recorded webMUSHRA {key} '.*{value}' is not a"):
        recorded_corpus(spec, root / "config.yaml")
    with pytest.raises(CorpusError, match=r"recorded webMUSHRA study names no folder it ran from \(root\)"):
        recorded_corpus({k: v for k, v in spec.items() if k != "root"}, root / "config.yaml")
    spec[key] = str((results if key == "results" else config).relative_to(root))
    assert len(recorded_corpus(spec, root / "config.yaml").clips) == len(
        read_webmushra(results, config).clips
    )
