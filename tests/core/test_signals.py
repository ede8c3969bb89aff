"""SIGTERM and SIGINT end sqa's commands with 128 + the signal and one line, every `finally` run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from sqa.core import signals
from tests.conftest import REPO


def ended(body: str) -> subprocess.CompletedProcess:
    """Run `body` (Python, indented under a `stop_on_signals` block) in a fresh process."""
    script = textwrap.dedent(
        """
        import os, signal, sys
        from sqa.core import signals
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with signals.stop_on_signals("cmd", lambda: "what to do next"):
        {body}
        finally:
            print("finally ran", flush=True)
        print("went on", flush=True)
        """
    ).format(body=textwrap.indent(textwrap.dedent(body), " " * 8))
    command = [sys.executable, "-c", script]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_exits_with_the_shells_status_one_line_and_the_finally_blocks_run(signum, status):
    result = ended(f'signals.stage("fitting candidate 2 of 3, x")\nos.kill(os.getpid(), {int(signum)})\n')
    assert result.returncode == status
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"cmd: stopped by {signum.name} while fitting candidate 2 of 3, x; what to do next"
    ]
    assert result.stdout.split() == ["finally", "ran"]


def test_a_command_that_is_not_signalled_goes_on_and_its_handlers_are_put_back():
    result = ended("print(signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, flush=True)\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "finally", "ran", "went", "on"]
    after = ended("pass\n")
    assert after.returncode == 0


def test_a_signal_the_command_was_started_to_ignore_stays_ignored():
    # A shell's background job (`cmd &`) starts with SIGINT ignored: it must not end on one.
    result = ended(
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "with signals.stop_on_signals('inner'):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "print('still here', flush=True)\n"
    )
    assert result.returncode == 0, result.stderr
    assert "still here" in result.stdout


def test_a_handler_installed_before_is_kept():
    result = ended(
        "signal.signal(signal.SIGTERM, lambda *a: print('own handler', flush=True))\n"
        "with signals.stop_on_signals('inner'):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
    )
    assert result.returncode == 0, result.stderr
    assert "own handler" in result.stdout


@pytest.mark.parametrize("command", ["sqa-bench", "eval.py"])
def test_the_entry_points_of_run_main_end_on_sigterm_with_143(command, tmp_path):
    # sqa-bench, sqa-eval and eval.py start their module's main() through run_main.
    module = tmp_path / "stopping_main.py"
    module.write_text("import os, signal\ndef main():\n    os.kill(os.getpid(), signal.SIGTERM)\n")
    script = f"from sqa.core.extras import run_main\nrun_main('stopping_main', {command!r})\n"
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 143
    assert result.stderr.strip().splitlines() == [f"{command}: stopped by SIGTERM"]


def test_sigterm_just_after_a_runs_set_aside_puts_the_previous_run_back_for_the_next_claim(tmp_path):
    from sqa.core import ownership
    from sqa.core.atomic import atomic_write_text
    from sqa.core.run_folder import claimed

    run_dir = tmp_path / "run"
    with claimed(run_dir, resume=False, overwrite=False):
        atomic_write_text(run_dir / "metrics.json", "the previous run's\n")
    pid = os.fork()
    if pid == 0:
        try:
            with signals.stop_on_signals("train.py"), claimed(run_dir, resume=False, overwrite=True):
                # The previous run's outputs are set aside now, not yet discarded.
                assert not (run_dir / "metrics.json").exists()
                os.kill(os.getpid(), signal.SIGTERM)
        except SystemExit as stopped:
            os._exit(stopped.code)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 143
    assert (run_dir / "metrics.json").read_text() == "the previous run's\n"
    assert "metrics.json" in ownership.owned(run_dir)
    with claimed(run_dir, resume=False, overwrite=True):
        pass
