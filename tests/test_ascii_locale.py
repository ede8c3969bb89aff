"""sqa under an ASCII locale (LANG=C in many containers): its text files are UTF-8 whatever the locale."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap

import numpy as np
import soundfile as sf

import sqa
from tests.conftest import REPO


def test_non_ascii_text_and_file_names_under_an_ascii_locale(tmp_path):
    # The export's README (its model card) holds an en dash; config.yaml holds the domain's name.
    # The command line itself stays ASCII (\u escapes): the locale decodes it.
    clip = np.full(16000, 0.1, dtype=np.float32)
    sf.write(tmp_path / "été.wav", clip, 16000, subtype="FLOAT")
    (tmp_path / "manifest.csv").write_text("wav_path\nété.wav\n", encoding="utf-8")
    code = textwrap.dedent(
        """
        import locale, os, sys
        from pathlib import Path
        import numpy as np, torch
        import sqa
        from sqa.exports.format import export_predictor
        from sqa.models.backbone import LogMelBackbone
        from sqa.models.predictor import MOSPredictor
        from sqa.scoring import cli

        root = Path(sys.argv[1])
        print(locale.getpreferredencoding(False))
        torch.manual_seed(0)
        model = MOSPredictor(LogMelBackbone(), num_domains=2, domain_dim=4)
        export = export_predictor(model, root / "export", 16000, ["ch\\u0153ur", "solo"])
        scorer = sqa.load(export, domain="ch\\u0153ur")
        print(scorer.score(np.full(16000, 0.1, dtype=np.float32), 16000))
        # The file's name as a shell hands it over here: its UTF-8 bytes, surrogate-escaped.
        (name,) = [str(root / n) for n in os.listdir(root) if n.endswith(".wav")]
        args = ["--checkpoint", str(export), "--domain", "solo", "--output", str(root / "s.csv")]
        assert cli.main([*args, "--num-workers", "1", name]) == 0
        # Read from a UTF-8 manifest, the name is text this locale cannot encode for the file system.
        args[-1] = str(root / "m.csv")
        print(cli.main([*args, str(root / "manifest.csv")]), file=sys.stderr)
        """
    )
    # Without coercion and UTF-8 mode, Python keeps the C locale's ASCII encoding as the default.
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=REPO, env=env, capture_output=True, timeout=300
    )
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 0, stderr[-3000:]
    # Nothing scorable: reported, exit code 1, no traceback.
    assert stderr.splitlines()[-1] == "1" and "Traceback" not in stderr
    # stderr is ASCII here: the name shows backslash-escaped.
    assert r"\xe9t\xe9.wav: the file system encoding of this locale (ascii) cannot encode the name" in stderr
    assert "LANG=C.UTF-8" in stderr and not (tmp_path / "m.csv").exists()
    encoding, score = result.stdout.decode().split()[:2]
    assert encoding == "ANSI_X3.4-1968"
    export = tmp_path / "export"
    assert "chœur" in (export / "config.yaml").read_text(encoding="utf-8")
    assert "1–5 scale" in (export / "README.md").read_text(encoding="utf-8")
    assert float(score) == sqa.load(export, domain="chœur").score(clip, 16000)
    # The file was read, and its name written back as the UTF-8 it is on disk.
    with (tmp_path / "s.csv").open(encoding="utf-8", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["path"] == str(tmp_path / "été.wav")
    assert float(row["score"]) == sqa.load(export, domain="solo").score(clip, 16000)
