"""`sniper bench e2e` shows the training run's own progress lines as they come (the bench
needs torch, which CI does not install; its runner is checked on a stand-in command)."""

from __future__ import annotations

import sys

import pytest

from sniper._bench._e2e import _run_showing_progress


def test_progress_lines_pass_through_and_a_failure_gives_its_last_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = (
        "import sys; print('step 5  100 ex/s', file=sys.stderr); print('INFO noise', "
        "file=sys.stderr); print('sniper: error: broke', file=sys.stderr); sys.exit({})"
    )
    assert _run_showing_progress([sys.executable, "-c", script.format(0)], "local") is None
    assert capsys.readouterr().err == "  sniper (local): step 5  100 ex/s\n"
    failed = _run_showing_progress([sys.executable, "-c", script.format(1)], "ray")
    assert failed == "sniper: error: broke"
