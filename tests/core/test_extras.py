import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import tomllib

from sqa.core.extras import MissingExtraError, require
from sqa.data.pitch import F0Extractor

REPO = Path(__file__).resolve().parents[2]


def test_require_returns_the_module():
    assert require("json", "train", "anything").dumps([1]) == "[1]"


def test_require_names_the_extra_for_a_missing_package():
    with pytest.raises(MissingExtraError, match=r"f0 extraction.*'no_such_package'.*sqa\[pitch\]"):
        require("no_such_package", "pitch", "f0 extraction")


@pytest.mark.parametrize(
    ("method", "module"), [("dio", "pyworld"), ("fcpe", "torchfcpe"), ("crepe", "torchcrepe")]
)
def test_pitch_without_its_extra_says_which_to_install(monkeypatch, tmp_path, method, module):
    # A None entry in sys.modules makes `import module` raise ImportError, as if it were absent.
    monkeypatch.setitem(sys.modules, module, None)
    extractor = F0Extractor(method=method, cache_dir=tmp_path)
    with pytest.raises(MissingExtraError, match=r"sqa\[pitch\]"):
        extractor.compute(np.zeros(1600, dtype=np.float32), 16000)


# Every package an extra brings: a subprocess that finds them all absent behaves as the core install.
EXTRAS_PACKAGES = (
    "hydra",
    "hydra_plugins",
    "omegaconf",
    "lightning",
    "pytorch_lightning",
    "matplotlib",
    "tensorboard",
    "torchaudio",
    "fairseq2",
    "fairseq2n",
    "s3prl",
    "transformers",
    "pyworld",
    "torchfcpe",
    "torchcrepe",
    "resampy",
    "wandb",
    "optuna",
    "submitit",
    "speechmos",
    "onnxruntime",
)

CORE_ONLY = """
import runpy, sys
for name in {blocked!r}:
    sys.modules[name] = None
target, *args = sys.argv[1:]
sys.argv = [target, *args]
if target.endswith(".py"):
    runpy.run_path(target, run_name="__main__")
else:
    module, function = target.split(":")
    sys.exit(getattr(__import__(module, fromlist=[function]), function)())
"""


def run_core_only(target, *args, cwd=REPO):
    code = CORE_ONLY.format(blocked=EXTRAS_PACKAGES)
    return subprocess.run(
        [sys.executable, "-c", code, str(target), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def console_scripts():
    with (REPO / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["project"]["scripts"]


def test_every_console_script_is_run_by_this_test():
    assert set(console_scripts()) == {
        "sqa-score",
        "sqa-eval",
        "sqa-table",
        "sqa-compare",
        "sqa-baseline",
        "sqa-import",
        "sqa-ensemble",
        "sqa-bench",
    }


@pytest.mark.parametrize(
    ("command", "extra"),
    [
        ("sqa-eval", "train"),
        ("sqa-ensemble", "train"),
        ("sqa-baseline", "baseline"),
        ("train.py", "train"),
        ("eval.py", "train"),
    ],
)
def test_a_command_of_an_extra_stops_with_one_line_naming_it(command, extra):
    target = REPO / command if command.endswith(".py") else console_scripts()[command]
    done = run_core_only(target)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"sqa[{extra}]" in lines[0] and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["sqa-table", "sqa-compare", "sqa-import", "sqa-score", "sqa-bench"])
def test_a_core_command_starts_without_the_extras(command):
    done = run_core_only(console_scripts()[command], "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")


@pytest.mark.slow  # a second Python process or a training (over 10 s)
def test_sqa_score_the_api_and_the_hub_entry_point_score_alike_without_the_extras(default_export, tmp_path):
    # A stereo file at 24 kHz: the core install downmixes and resamples, in DataLoader workers too.
    t = np.arange(24000) / 24000
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    sf.write(tmp_path / "a.wav", np.stack([tone, 0.5 * tone], axis=1), 24000)
    out = tmp_path / "s.csv"
    args = ["--checkpoint", default_export, "--output", out, "--num-workers", 1, tmp_path / "a.wav"]
    done = run_core_only(console_scripts()["sqa-score"], *args)
    assert done.returncode == 0, done.stderr
    score = float(out.read_text(encoding="utf-8").splitlines()[1].split(",")[1])
    (tmp_path / "hub.py").write_text(
        "import sys\nimport soundfile as sf\nimport sqa\n"
        "assert 'torch' not in sys.modules, 'import sqa alone must stay light'\n"
        "sys.path.insert(0, sys.argv[1])\nimport hubconf\n"
        "wav, rate = sf.read(sys.argv[3], dtype='float32')\n"
        "print(hubconf.load(sys.argv[2]).score(wav, rate), sqa.load(sys.argv[2]).score(wav, rate))\n",
        encoding="utf-8",
    )
    done = run_core_only(tmp_path / "hub.py", REPO, default_export, tmp_path / "a.wav")
    assert done.returncode == 0, done.stderr
    hub, api = map(float, done.stdout.split())
    assert hub == api == pytest.approx(score, abs=1e-5)
