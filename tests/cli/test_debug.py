"""A failure is one line ``sniper: error: ...`` without a traceback; ``--debug``, anywhere on the
command line, prints the traceback above that same line."""

from __future__ import annotations

import argparse

import pytest

from sniper.cli import _hash, main

LINE = (
    "sniper: error: data must be synthetic, criteo:PATH, parquet:PATH, csv:PATH or tsv:PATH, "
    "got 'nope'\n"
)
BAD = ["train", "--data", "nope"]


def test_a_usage_error_is_one_line_and_debug_adds_the_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(BAD) == 2
    assert capsys.readouterr().err == LINE
    for argv in (["--debug", *BAD], [*BAD, "--debug"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("Traceback (most recent call last):\n"), err
        assert "ValueError: data must be synthetic" in err
        assert err.endswith(LINE)


def test_an_unexpected_error_is_one_line_naming_it_and_asking_for_debug(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(args: argparse.Namespace) -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(_hash, "run", broken)  # sniper hash, with a bug
    assert main(["hash", "name", "x"]) == 1
    assert capsys.readouterr().err == (
        "sniper: error: RuntimeError: boom (a bug in sniper; run again with --debug for the "
        "traceback)\n"
    )
    assert main(["hash", "name", "x", "--debug"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert err.endswith("sniper: error: RuntimeError: boom (a bug in sniper)\n")


def test_a_broken_pipe_not_of_stdout_is_an_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A closed standard output ends a command quietly (tests/cli/test_commands.py); a broken
    pipe elsewhere (a child's input) while standard output is open is still an error."""

    def child_gone(args: argparse.Namespace) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(_hash, "run", child_gone)
    assert main(["hash", "name", "x"]) == 2
    assert capsys.readouterr().err == "sniper: error: [Errno 32] Broken pipe\n"
