"""Corpora naming a FIFO, device, socket or folder: each refused by name, none opened to block."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.data.readers import read_csv_manifest, read_singmos_pro, read_vmc24
from sqa.data.validate import validate_corpus

REPO = Path(__file__).resolve().parents[2]
REFUSED = "not a regular file (a FIFO, device or socket); refusing to open it"
HEADER = "wav_path,score,system_id,sample_id,split\n"


def special(path: Path, kind: str) -> Path:
    """Make `path` a FIFO, a link to /dev/zero, a (closed, still listed) socket or a folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
    else:
        path.mkdir()
    return path


def singmos_pro(root: Path, special_name: str | None = None, kind: str = "fifo") -> Path:
    """A two-clip SingMOS-Pro layout (no audio) whose info/`special_name` is a special file of `kind`."""
    files = {
        "split.json": {"p1": {"train": ["s1-u1"], "test": ["s1-u2"]}},
        "score.json": {
            "utterance": {
                u: {"sys_id": "s1", "wav": f"wav/{u}.wav", "score": {"mos": 3.0}} for u in ("s1-u1", "s1-u2")
            }
        },
    }
    (root / "info").mkdir(parents=True)
    for name, content in files.items():
        if name != special_name:
            (root / "info" / name).write_text(json.dumps(content), encoding="utf-8")
    if special_name is not None:
        special(root / "info" / special_name, kind)
    return root


def read_all(folder: str) -> dict[str, str]:
    """Every case's outcome: `Type: message` of what the reader raised, or the clip problems found.

    Runs in a process of its own (`special_corpora`): a regression blocks in open() on a FIFO forever.
    """
    base = Path(folder)
    outcomes: dict[str, str] = {}
    cases = {
        **{
            f"csv-{k}": lambda k=k: read_csv_manifest(base / f"{k}.csv")
            for k in ("fifo", "device", "socket", "folder")
        },
        **{
            f"json-{name}-{kind}": lambda name=name, kind=kind: read_singmos_pro(
                base / f"{name}-{kind}", test_batches=["p1"]
            )
            for name in ("split.json", "score.json", "sys_info.json")
            for kind in ("fifo", "device")
        },
        "vmc24-fifo": lambda: read_vmc24(base / "vmc24"),
    }
    for name, read in cases.items():
        try:
            read()
        except Exception as err:  # the outcome under test, whatever its type
            outcomes[name] = f"{type(err).__name__}: {err}"
        else:
            outcomes[name] = "read"
    # Clip audio: the header is read (the 16 kHz filter), then every clip is validated.
    corpus = read_csv_manifest(base / "clips" / "m.csv", sample_rate_filter=16000)
    outcomes["clips"] = "\n".join(str(p) for p in validate_corpus(corpus, 16000, 400) if p.sample_id)
    return outcomes


@pytest.fixture(scope="module")
def special_corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A folder of special files and `read_all`'s outcomes there, run in a subprocess with a timeout."""
    base = tmp_path_factory.mktemp("special")
    for kind in ("fifo", "device", "socket", "folder"):
        special(base / f"{kind}.csv", kind)
    for name in ("split.json", "score.json", "sys_info.json"):
        for kind in ("fifo", "device"):
            singmos_pro(base / f"{name}-{kind}", name, kind)
    special(base / "vmc24" / "sets" / "train_mos_list.txt", "fifo")
    clips = base / "clips"
    clips.mkdir()
    sf.write(clips / "good.wav", np.full(8000, 0.1), 16000)
    for kind in ("fifo", "device", "folder"):
        special(clips / f"{kind}.wav", kind)
    rows = "".join(f"{n}.wav,3,A,{n},train\n" for n in ("good", "fifo", "device", "folder"))
    (clips / "m.csv").write_text(HEADER + rows, encoding="utf-8")
    code = (
        "import json, sys; from tests.data import test_special_files as t; "
        "print(json.dumps(t.read_all(sys.argv[1])))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(base)], cwd=REPO, capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        pytest.fail("reading a corpus of special files did not finish: an open() blocks on a FIFO")
    assert done.returncode == 0, done.stderr
    return base, json.loads(done.stdout)


@pytest.mark.parametrize("kind", ["fifo", "device", "socket"])
def test_a_csv_manifest_that_is_no_regular_file_is_refused(special_corpora, kind):
    base, outcomes = special_corpora
    path = base / f"{kind}.csv"
    assert outcomes[f"csv-{kind}"] == f"CorpusError: {path}: {REFUSED}"


def test_a_csv_manifest_that_is_a_folder_is_refused(special_corpora):
    base, outcomes = special_corpora
    path = base / "folder.csv"
    assert outcomes["csv-folder"] == f"CorpusError: {path}: is a folder, not a file"


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("name", ["split.json", "score.json", "sys_info.json"])
def test_singmos_pro_metadata_that_is_no_regular_file_is_refused(special_corpora, name, kind):
    base, outcomes = special_corpora
    # sys_info.json is optional, but one that exists as a FIFO or device is refused, not skipped.
    path = base / f"{name}-{kind}" / "info" / name
    assert outcomes[f"json-{name}-{kind}"] == f"CorpusError: {path}: {REFUSED}"


def test_a_vmc24_list_that_is_a_fifo_is_refused(special_corpora):
    base, outcomes = special_corpora
    path = base / "vmc24" / "sets" / "train_mos_list.txt"
    assert outcomes["vmc24-fifo"] == f"CorpusError: {path}: {REFUSED}"


def test_clip_audio_that_is_no_regular_file_is_a_clip_problem(special_corpora):
    base, outcomes = special_corpora
    clips = base / "clips"
    assert outcomes["clips"].splitlines() == [
        f"{clips / 'fifo.wav'} [fifo]: {REFUSED}",
        f"{clips / 'device.wav'} [device]: {REFUSED}",
        f"{clips / 'folder.wav'} [folder]: is a folder, not an audio file",
    ]


def test_the_readers_still_read_regular_files(tmp_path):
    corpus = read_singmos_pro(singmos_pro(tmp_path), test_batches=["p1"])
    assert [c.sample_id for c in corpus.clips] == ["s1-u1", "s1-u2"]
    assert corpus.systems is None
