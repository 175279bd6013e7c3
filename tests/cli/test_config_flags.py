"""Every key of ``sniper train``'s and ``sniper serve``'s configs is a flag, generated from the
config class: typed by its annotation, explained by its docstring, and given only when a user
gives it (so the TOML file's value stands otherwise)."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from sniper._config import RunSettings, load_config
from sniper.cli import main
from sniper.cli._config_flags import add_config_flags, attribute_docs, config_overrides
from sniper.cli._main import build_parser
from sniper.cli._parsing import Parser
from sniper.cluster import ServeConfig, TrainConfig
from tests.rpc._grpcio import start_server, stop_server

CONFIGS = [("train", TrainConfig), ("serve", ServeConfig)]


def command_parser(command: str) -> argparse.ArgumentParser:
    """The parser of ``sniper COMMAND``, its deferred flags added."""
    (commands,) = (
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    parser: argparse.ArgumentParser = commands.choices[command]
    parser.format_help()
    return parser


@pytest.mark.parametrize(("command", "config_class"), CONFIGS)
def test_every_key_of_the_config_has_its_flag(command: str, config_class: type) -> None:
    options = command_parser(command)._option_string_actions
    for field in dataclasses.fields(config_class):
        flag = "--" + field.name.replace("_", "-")
        assert flag in options, flag
        assert options[flag].dest == field.name
        assert options[flag].default is None, flag  # the file's value stands unless given


def test_serve_takes_the_token_file_the_tls_issue_named(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", "--auth-token-file", "token", "--role", "hub"])
    overrides = config_overrides(ServeConfig, args)
    assert (overrides["auth_token_file"], overrides["role"], overrides["port"]) == (
        "token",
        "hub",
        None,
    )
    # The flag reaches the server's config: a missing file is the token's own error.
    done = subprocess.run(
        [sys.executable, "-m", "sniper", "serve", "--auth-token-file", "missing"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (
        2,
        "sniper: error: auth_token_file 'missing' cannot be read: No such file or directory\n",
    )


def test_a_server_given_the_token_flag_guards_its_port(tmp_path: Path) -> None:
    """Beyond loopback, a server without TLS or a token logs a risk; the flag's token counts."""
    (tmp_path / "token").write_text("s3cret\n")
    ps = start_server(tmp_path, "--workers", "1", "--host", "0.0.0.0", "--auth-token-file", "token")
    assert stop_server(ps) == 0
    assert "without TLS or a token" not in ps.stderr_path.read_text()


def test_help_is_the_first_sentence_of_the_field_docstring_and_its_default() -> None:
    help_text = " ".join(command_parser("serve").format_help().split())
    assert (
        "--auth-token-file AUTH_TOKEN_FILE A file holding the bearer token every call must "
        'carry (health checks excepted). (default "")'
    ) in help_text
    # A field without a docstring still says its default.
    assert '--tls-key TLS_KEY default ""' in help_text
    # reST roles and literals are unwrapped; the rest of a long docstring stays in the code.
    assert (
        "--read-on-loop, --no-read-on-loop Read each batch on the event loop's thread "
        "instead of a worker thread. (default false)" in help_text
    )


def test_attribute_docs_come_from_the_class_and_its_bases() -> None:
    docs = attribute_docs(ServeConfig)
    assert docs["auth_token_file"] == attribute_docs(RunSettings)["auth_token_file"]
    assert docs["auth_token_file"] == (
        "A file holding the bearer token every call must carry (health checks excepted)."
    )
    assert docs["ps"].startswith("Comma-separated ``host:port`` of every ps")
    assert "host" not in docs  # no docstring under it


def test_flags_override_the_file_and_only_when_given(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text('lr = 0.5\nhidden = [8]\nplacement = "hash"\n')
    argv = ["train", "--config", str(tmp_path / "job.toml")]

    def loaded(*flags: str) -> TrainConfig:
        args = build_parser().parse_args([*argv, *flags])
        return load_config(TrainConfig, Path(args.config), config_overrides(TrainConfig, args))

    assert (loaded().lr, loaded().hidden, loaded().progress) == (0.5, (8,), True)
    config = loaded(
        *("--lr", "0.01", "--hidden", "32,16", "--no-progress", "--auto-shard"),
        *("--variables", "{default = {dim = 8}, C1 = {capacity = 100}}"),
        *("--resources", "{ps = {num_cpus = 2}}"),
    )
    assert (config.lr, config.hidden, config.progress, config.auto_shard) == (
        0.01,
        (32, 16),
        False,
        True,
    )
    assert config.variables == {"default": {"dim": 8}, "C1": {"capacity": 100}}
    assert config.resources == {"ps": {"num_cpus": 2.0}}
    assert config.placement == "hash"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("train", "--hidden", "32,x"), "argument --hidden: expected comma-separated values"),
        (("train", "--variables", "{default ="), "argument --variables: expected a TOML inline"),
        (("train", "--placement", "random"), "argument --placement: invalid choice: 'random'"),
        (("serve", "--drain-timeout", "soon"), "argument --drain-timeout: invalid float value"),
        # A hand-written flag wins over the generated one: --num-ps keeps its stricter type.
        (("train", "--num-ps", "0"), "argument --num-ps: expected a positive integer, got 0"),
    ],
)
def test_a_bad_flag_value_is_a_usage_error(
    args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 2
    assert f"sniper {args[0]}: error: {message}" in capsys.readouterr().err


@dataclasses.dataclass(frozen=True)
class Example:
    """A config of every kind of field the flags support."""

    count: int | None = None
    """How many."""
    on: bool = True
    mode: Literal["a", "b"] = "a"
    widths: tuple[float, ...] = (1.0,)
    table: dict[str, int] = dataclasses.field(default_factory=dict)
    taken: str = ""


def test_each_annotation_becomes_its_flag() -> None:
    parser = Parser(prog="example")
    parser.add_argument("--taken", type=int, help="hand-written")
    add_config_flags(parser, Example, "keys")
    args = parser.parse_args(
        ["--count", "3", "--no-on", "--mode", "b", "--widths", "0.5, 2", "--table", "{x = 1}"]
    )
    assert config_overrides(Example, args) == {
        "count": 3,
        "on": False,
        "mode": "b",
        "widths": (0.5, 2.0),
        "table": {"x": 1},
        "taken": None,
    }
    assert parser._option_string_actions["--taken"].help == "hand-written"
    assert parser._option_string_actions["--count"].help == "How many. (default None)"
    assert set(vars(parser.parse_args([])).values()) == {None}


def test_a_field_of_a_type_without_a_flag_is_a_programming_error() -> None:
    @dataclasses.dataclass(frozen=True)
    class Odd:
        path: Path = Path()

    with pytest.raises(TypeError, match=r"^no flag for path: its type "):
        add_config_flags(Parser(), Odd, "keys")
