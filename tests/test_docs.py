"""Every command block and every TOML block of the docs runs or parses, as written.

Docs are README.md, docs/*.md, experiments/README.md and benchmarks/README.md. A block fenced
```sh, ```bash, ```shell, ```console or a plain ``` holds commands; output, listings and
synopses are fenced ```text. A command block runs here unless the line right before its
fence is one of these HTML comments, which Markdown does not render:

    <!-- illustrative: REASON -->   not run (it needs a GPU, runs for minutes, is CI itself...):
                                    its ``sniper`` lines must still parse with sniper's own
                                    command line and its ``make`` lines name Makefile targets
    <!-- test: tests/PATH.py -->    another test runs it (that file must name the doc)

A block that runs is run line by line (a ``$ `` prompt and ``#`` comments stripped; in
```console only the prompted lines) in a directory of fixtures (:func:`fixtures`: Criteo
files where the README's job reads them, the README's own job and secure.toml, certificates,
the experiment files), each line a ``sniper ...`` command run as ``python -m sniper ...``.
Nothing is changed but the lines in REWRITES and SKIPS, each with its reason, so that a doc
that drifts from what runs fails here. ``sniper serve`` runs until its listening line, then
is stopped with SIGTERM. Every command must exit 0.

Each ```toml block parses against the config class it belongs to (:func:`check_toml`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import trustme

from sniper.cli._main import build_parser
from sniper.cluster import ServeConfig, load_cluster_spec, load_serve_config, load_train_config
from sniper.data import FeatureSpec
from sniper.experiment import load_experiment
from sniper.models import ModelConfig
from tests.data._helpers import write_criteo
from tests.rpc._grpcio import start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
DOCS = [
    Path("README.md"),
    *sorted(p.relative_to(ROOT) for p in (ROOT / "docs").glob("*.md")),
    Path("experiments/README.md"),
    Path("benchmarks/README.md"),
]
COMMAND_LANGUAGES = {"", "sh", "bash", "shell", "console"}

REWRITES = {
    # README, Durable training: stop early, so that the `--resume ck` below has steps to train.
    "sniper train --config job.toml --checkpoint-dir ck --checkpoint-every 100": (
        "sniper train --config job.toml --checkpoint-dir ck --checkpoint-every 100 --max-steps 3"
    ),
    # README, Watch and secure a run: free ports, where 9100 and 9101 may be taken.
    "sniper train --config job.toml --metrics-port 9100": (
        "sniper train --config job.toml --metrics-port 0"
    ),
    "sniper serve --role ps --metrics-port 9101 --config secure.toml": (
        "sniper serve --role ps --metrics-port 0 --config secure.toml"
    ),
}
"""A documented line -> the line run instead."""

SKIPS = {
    "sniper experiment run experiments/dispatch.toml": (
        "the full size takes minutes; tests/experiment/test_run.py runs every file with --quick"
    ),
    "sniper experiment run experiments/dispatch.toml --quick": (
        "tests/experiment/test_run.py runs every file with --quick and --out"
    ),
    "sniper experiment run experiments/dispatch.toml --out /tmp/dispatch": (
        "tests/experiment/test_run.py runs every file with --quick and --out"
    ),
}
"""A documented line of a block that runs -> why this line is not run (it still parses)."""

PLACEHOLDERS = {"N": "2", "K": "4"}
"""Words an illustrative line uses for a number, and a number that parses in their place."""


@dataclasses.dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    language: str
    text: str
    marker: str
    """``illustrative``, ``test`` or "" (none)."""
    reason: str

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


FENCE = re.compile(r"^```(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*(illustrative|test):\s*(.*?)\s*-->$")


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc``, each with the marker on the line before its fence."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    found, index = [], 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        end = next(j for j in range(index + 1, len(lines)) if lines[j].startswith("```"))
        marker = MARKER.match(lines[index - 1]) if index else None
        kind, reason = marker.groups() if marker else ("", "")
        body = "\n".join(lines[index + 1 : end])
        found.append(Block(doc, index + 1, fence.group(1), body, kind, reason))
        index = end + 1
    return found


ALL = [block for doc in DOCS for block in blocks(doc)]
COMMAND_BLOCKS = [b for b in ALL if b.language in COMMAND_LANGUAGES]
TOML_BLOCKS = [b for b in ALL if b.language == "toml"]


def commands(block: Block) -> list[str]:
    """The block's commands, continuation lines joined, prompts and comments stripped, each
    normalized to single spaces (the form REWRITES and SKIPS are keyed by)."""
    text = block.text.replace("\\\n", " ")
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if block.language == "console":
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        words = shlex.split(line, comments=True)
        if words:
            lines.append(shlex.join(words))
    return lines


def sniper_argv(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """The environment assignments before a command, and its words from ``sniper`` on."""
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words


def parse_error(words: list[str]) -> str:
    """What sniper's own parser says of ``sniper WORDS`` ("" when it parses)."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(words)
    except SystemExit as exc:
        return stderr.getvalue().strip() or f"exit {exc.code}"
    return ""


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+):", text, flags=re.MULTILINE))


def test_every_command_block_is_found_and_marked_well() -> None:
    """The markers are spelled right, and the docs' command blocks are where the tests look."""
    assert len(COMMAND_BLOCKS) >= 15
    for block in ALL:
        if block.marker:
            assert block.reason, f"{block.where}: a marker needs its reason"
            assert block.language in COMMAND_LANGUAGES | {"toml", "yaml"}, block.where
        if block.marker == "test":
            test = ROOT / block.reason.split()[0]
            assert test.is_file(), f"{block.where}: {test} does not exist"
            assert block.doc.name in test.read_text(), f"{block.where}: {test} never reads it"
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        stray = re.findall(r"<!--\s*(?:illustrative|test)\b.*-->\n(?!```)", text)
        assert not stray, f"{doc}: a marker not right before a fence: {stray}"


@pytest.mark.parametrize(
    "block", [b for b in COMMAND_BLOCKS if b.marker != "test"], ids=lambda b: b.where
)
def test_every_sniper_line_parses(block: Block) -> None:
    """Run or not, each ``sniper`` line is one sniper's command line accepts, and each
    ``make`` line names a target of the Makefile (a script that another test runs is that
    test's)."""
    for line in commands(block):
        words = [PLACEHOLDERS.get(w, w) for w in shlex.split(line)]
        _, words = sniper_argv(words)
        if words and words[0] == "sniper":
            error = parse_error(words[1:])
            assert not error, f"{block.where}: `{line}`: {error}"
        elif words and words[0] == "make":
            assert set(words[1:]) <= makefile_targets(), f"{block.where}: `{line}`"


RUNNABLE = [b for b in COMMAND_BLOCKS if not b.marker]


def test_every_rewrite_and_skip_names_a_documented_line() -> None:
    """A table entry whose line left the docs would hide nothing: it must go too."""
    documented = {line for block in RUNNABLE for line in commands(block)}
    assert not (set(REWRITES) | set(SKIPS)) - documented


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory as the docs' commands expect: the README's job.toml ("Train on your own
    data", verbatim) with its Criteo files, its secure.toml with a CA, a certificate for
    127.0.0.1, its key and a token, and the experiment files."""
    root = tmp_path_factory.mktemp("fixtures")
    (root / "data").mkdir()
    write_criteo(root / "data" / "train", 6000, seed=0)  # 6 batches of the job's 1024
    held_out = write_criteo(root / "day_23.tsv", 1000, seed=1)
    with held_out.open("rb") as plain, gzip.open(root / "data" / "day_23.gz", "wb") as packed:
        shutil.copyfileobj(plain, packed)
    held_out.unlink()
    (root / "job.toml").write_text(toml_under("README.md", "## Train on your own data"))
    (root / "secure.toml").write_text(toml_under("README.md", "## Watch and secure a run"))
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    role = ca.issue_cert("127.0.0.1", "localhost")
    role.cert_chain_pems[0].write_to_path(str(root / "role.pem"))
    role.private_key_pem.write_to_path(str(root / "role-key.pem"))
    (root / "token").write_text("s3cret\n")
    (root / "experiments").mkdir()
    for experiment in (ROOT / "experiments").glob("*.toml"):
        shutil.copy(experiment, root / "experiments")
    return root


def toml_under(doc: str, heading: str) -> str:
    """The first ```toml block after ``heading`` in ``doc``."""
    start = (ROOT / doc).read_text().splitlines().index(heading) + 1
    return next(b.text for b in TOML_BLOCKS if str(b.doc) == doc and b.line > start) + "\n"


def run_line(line: str, cwd: Path, where: str) -> None:
    env, words = sniper_argv(shlex.split(line))
    assert words[0] == "sniper", f"{where}: `{line}` is not a sniper command: mark the block"
    command = [sys.executable, "-m", "sniper", *words[1:]]
    if words[1] == "serve":  # serves until a signal
        server = start_server(cwd, command=command)
        status = stop_server(server)
        assert status == 0, f"{where}: `{line}` exited {status}:\n{server.stderr()[-3000:]}"
        return
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, (
        f"{where}: `{line}` exited {done.returncode}:\n{done.stderr[-3000:]}"
    )


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.where)
def test_every_command_block_runs(block: Block, fixtures: Path, tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    shutil.copytree(fixtures, cwd)
    ran = 0
    for line in commands(block):
        if line in SKIPS:
            continue
        run_line(REWRITES.get(line, line), cwd, block.where)
        ran += 1
    assert ran, f"{block.where}: every line is skipped: mark the block illustrative instead"


def check_toml(block: Block, previous: list[Block]) -> None:
    """``block`` against its class, chosen by what it holds: ``[[ps]]``, ``[[hub]]`` or
    ``[[trainer]]`` entries are a cluster spec (ranks alone, after the doc's spec before
    them); ``[sweep]`` an experiment file; a lone ``[model]`` or ``[features]`` that table's
    class; anything else a training config (its variables, model and features resolved),
    and also a server's config when every key is one (secure.toml's keys are both)."""
    values = tomllib.loads(block.text)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"sniper-docs-{os.getpid()}.toml"
    text = block.text
    if set(values) == {"trainer"}:
        specs = [b for b in previous if {"ps", "hub"} <= set(tomllib.loads(b.text))]
        assert specs, f"{block.where}: ranks with no spec before them"
        text = specs[-1].text + "\n" + text
    path.write_text(text)
    try:
        if set(values) & {"ps", "hub", "trainer"}:
            load_cluster_spec(path)
        elif "sweep" in values:
            load_experiment(path)
        elif set(values) == {"model"}:
            ModelConfig.from_table(values["model"])
        elif set(values) == {"features"}:
            FeatureSpec.from_table(values["features"])
        else:
            config = load_train_config(path, {})
            config.model_spec()
            config.model_config()
            if "features" in values:
                FeatureSpec.from_table(values["features"])
            if set(values) <= {f.name for f in dataclasses.fields(ServeConfig)}:
                load_serve_config(path, {})
    finally:
        path.unlink()


@pytest.mark.parametrize("block", TOML_BLOCKS, ids=lambda b: b.where)
def test_every_toml_block_parses(block: Block) -> None:
    try:
        check_toml(block, [b for b in TOML_BLOCKS if b.doc == block.doc and b.line < block.line])
    except (ValueError, TypeError, LookupError) as exc:
        raise AssertionError(f"{block.where}: {exc}") from None


def test_the_docs_have_toml_blocks_of_each_kind() -> None:
    kinds = [frozenset(tomllib.loads(b.text)) for b in TOML_BLOCKS]
    assert any("sweep" in k for k in kinds)
    assert any("ps" in k for k in kinds)
    assert frozenset({"model"}) in kinds
    assert any("features" in k for k in kinds)


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            found: argparse.ArgumentParser = action.choices[name]
            return found
    return None


def every_command(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> set[str]:
    """``sniper A B`` of every command the parser has, leaves only."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        return {" ".join(("sniper", *path))}
    return {c for n, p in groups[0].choices.items() for c in every_command(p, (*path, n))}


def test_the_command_line_synopsis_is_sniper_s_own() -> None:
    """README's "Command line" names every command, and each flag it shows for one is that
    command's (``sniper eval --batch-size`` was shown; it belongs to ``train``)."""
    start = (ROOT / "README.md").read_text().splitlines().index("## Command line") + 1
    block = next(b for b in ALL if b.doc == Path("README.md") and b.line > start)
    assert block.language == "text"
    entries: list[str] = []
    for line in block.text.splitlines():
        if line.startswith("sniper "):
            entries.append(line)
        else:
            entries[-1] += " " + line
    shown = set()
    for entry in entries:
        parser: Any = build_parser()
        path = ["sniper"]
        for word in entry.split()[1:]:
            sub = subcommand(parser, word) if re.fullmatch(r"[a-z][a-z0-9-]*", word) else None
            if sub is None:
                break
            parser, path = sub, [*path, word]
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", entry))
        if parser.prefix_chars == "-":
            parser._add_deferred()  # the flags generated from config classes
            unknown = flags - set(parser._option_string_actions)
        else:  # it parses its own arguments (conformance): they are in its help
            help_text = subprocess.run(
                [sys.executable, "-m", *path, "--help"], capture_output=True, text=True, check=False
            ).stdout
            unknown = {flag for flag in flags if flag not in help_text}
        assert not unknown, f"`{' '.join(path)}` has no {sorted(unknown)}: {entry}"
        shown.add(" ".join(path))
    assert every_command(build_parser()) <= shown


def flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``table``'s values by dotted key, nested tables opened."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out |= flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_criteo_toml_is_the_readme_s_job_and_what_the_readme_says_it_adds() -> None:
    """README: "criteo.toml is this file with an output path, `num_ps = 2` and two more
    variables (C12 sharded like C3, C9 narrow)" (it once differed from the block)."""
    readme = flat(tomllib.loads(toml_under("README.md", "## Train on your own data")))
    shipped = flat(tomllib.loads((ROOT / "experiments/configs/criteo.toml").read_text()))
    assert {key: shipped.get(key) for key in readme} == readme
    added = sorted(
        {key.split(".")[1] if "." in key else key for key in set(shipped) - readme.keys()}
    )
    assert added == ["C12", "C9", "num_ps", "output"]
    assert shipped["num_ps"] == 2
    assert shipped["variables.C12.shards"] == shipped["variables.C3.shards"]


def test_every_command_in_prose_names_flags_sniper_has() -> None:
    """A ``sniper ...`` span in a doc's prose may leave out required arguments or write a
    placeholder for a value, but every command and flag it names exists (the README once
    showed ``sniper eval ... --batch-size N``, a flag of ``train``)."""
    spans = [
        (doc, span)
        for doc in DOCS
        for span in re.findall(r"`(sniper [^`]+)`", (ROOT / doc).read_text().replace("\n", " "))
    ]
    assert len(spans) > 50
    for doc, span in spans:
        words = [
            PLACEHOLDERS.get(w, w) for w in shlex.split(span.replace("[", " ").replace("]", " "))
        ]
        if words[1:] == ["..."]:
            continue
        error = parse_error(words[1:])
        assert "unrecognized arguments" not in error, f"{doc}: `{span}`: {error}"
        assert "invalid choice" not in error, f"{doc}: `{span}`: {error}"


def test_seed_ctr_small_is_the_default_with_what_the_readme_says_differs() -> None:
    """README: "seed_ctr_small.toml is the default's data and model with 2 ps on
    `work_stealing` of 1 worker each, where the default runs 1 ps on `adaptive`" (it once
    said the file spelled the default out)."""
    default = load_train_config(None, {})
    small = load_train_config(ROOT / "experiments/configs/seed_ctr_small.toml", {})
    differ = {
        f.name: getattr(small, f.name)
        for f in dataclasses.fields(default)
        if getattr(small, f.name) != getattr(default, f.name) and f.name != "variables"
    }
    assert differ == {"num_ps": 2, "scheduler": "work_stealing", "workers": 1}
    assert small.model_spec() == default.model_spec()
    assert (default.num_ps, default.scheduler) == (0, "adaptive")  # 0: 1 ps in one process
