"""What harness-mem and harness-loop share (harness_mem.cliutils): help, version, the error mapper,
--json, the model flags, and `migrate --list` over both migration sets."""

from __future__ import annotations

import json
import socket
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from harness_loop.cli import main as loop_cli
from harness_loop.runstore import RunRecord, RunStore
from harness_mem.cli import cli as mem_cli
from harness_mem.errors import NotFoundError

CLIS = {"harness-mem": (mem_cli, "HARNESS_MEM_RAISE_ERRORS"), "harness-loop": (loop_cli, "HARNESS_LOOP_RAISE_ERRORS")}


def invoke(name: str, *args: str, **kwargs: Any) -> Result:
    return CliRunner().invoke(CLIS[name][0], list(args), prog_name=name, catch_exceptions=False, **kwargs)


@pytest.fixture
def outside_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user runs it: no *_RAISE_ERRORS, and not under the test suite."""
    monkeypatch.delattr(sys, "_called_from_test", raising=False)
    for _, env in CLIS.values():
        monkeypatch.delenv(env, raising=False)


@pytest.mark.parametrize("name", CLIS)
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_h_is_help(name: str, flag: str) -> None:
    result = invoke(name, flag)
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout.startswith(f"Usage: {name} [OPTIONS] COMMAND [ARGS]...\n")
    assert "  -h, --help  " in result.stdout and "--version" in result.stdout


@pytest.mark.parametrize(("name", "args"), [("harness-mem", ["migrate", "-h"]), ("harness-loop", ["runs", "list", "-h"])])
def test_h_is_help_for_subcommands_too(name: str, args: list[str]) -> None:
    result = invoke(name, *args)
    assert result.exit_code == 0 and result.stdout.startswith(f"Usage: {name} {' '.join(args[:-1])} [OPTIONS]")


@pytest.mark.parametrize("name", CLIS)
def test_version(name: str) -> None:
    result = invoke(name, "--version")
    assert result.exit_code == 0
    assert result.stdout == f"{name}, version {version('harness-mem')}\n"


@pytest.mark.parametrize(("name", "args", "message"), [
    ("harness-mem", ["get", "nope"],
     "Error: no entry with id 'nope' in namespace 'default' — `harness-mem list` shows the ids\n"),
    ("harness-loop", ["runs", "show", "nope"],
     "Error: no run 'nope' — `harness-loop runs list` shows the runs in this namespace\n"),
])
def test_a_known_error_is_one_line_and_exit_1(db_path: Path, name: str, args: list[str], message: str) -> None:
    invoke("harness-mem", "--db", str(db_path), "init")  # the file exists: the error is about the id
    result = invoke(name, *(["--db", str(db_path), *args] if name == "harness-mem" else [args[0], "--db", str(db_path), *args[1:]]))
    assert result.exit_code == 1
    assert result.stderr == message and result.stdout == ""


def _break_default_path(monkeypatch: pytest.MonkeyPatch, name: str, exc: Exception) -> list[str]:
    """Make the next command fail with ``exc`` where nobody expects it; returns its arguments."""

    def broken() -> Path:
        raise exc

    module = "harness_mem.cli" if name == "harness-mem" else "harness_loop.cli"
    monkeypatch.setattr(f"{module}.default_path", broken)
    return ["db", "path"] if name == "harness-mem" else ["runs", "list"]


@pytest.mark.parametrize("name", CLIS)
def test_an_unexpected_error_is_one_line_for_users(name: str, monkeypatch: pytest.MonkeyPatch, outside_tests: None) -> None:
    args = _break_default_path(monkeypatch, name, RuntimeError("disk\n  on fire"))
    result = invoke(name, *args)
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: unexpected RuntimeError: disk on fire — set {CLIS[name][1]}=1 for a traceback and report it\n"
    )


@pytest.mark.parametrize("name", CLIS)
def test_an_unexpected_error_keeps_its_traceback_when_asked(
    name: str, monkeypatch: pytest.MonkeyPatch, outside_tests: None
) -> None:
    args = _break_default_path(monkeypatch, name, RuntimeError("disk on fire"))
    monkeypatch.setenv(CLIS[name][1], "1")
    with pytest.raises(RuntimeError, match="disk on fire"):
        invoke(name, *args)


@pytest.mark.parametrize("name", CLIS)
def test_an_unexpected_error_keeps_its_traceback_under_tests(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for _, env in CLIS.values():
        monkeypatch.delenv(env, raising=False)
    assert hasattr(sys, "_called_from_test")
    args = _break_default_path(monkeypatch, name, RuntimeError("disk on fire"))
    with pytest.raises(RuntimeError):
        invoke(name, *args)


@pytest.mark.parametrize("name", CLIS)
def test_a_known_error_raised_anywhere_is_mapped_even_under_tests(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    args = _break_default_path(monkeypatch, name, NotFoundError("nothing there — look elsewhere"))
    result = invoke(name, *args)
    assert (result.exit_code, result.stderr) == (1, "Error: nothing there — look elsewhere\n")


def _options(command: click.Command) -> dict[str, click.Option]:
    return {opt: p for p in command.params if isinstance(p, click.Option) and not p.hidden for opt in p.opts}


def test_both_clis_take_the_same_model_flags_and_json_option() -> None:
    distill = mem_cli.commands["skills"].commands["distill"]  # type: ignore[attr-defined]
    run = loop_cli.commands["run"]
    model_flags = ["--model-url", "--model", "--api-key", "--model-timeout"]
    mem_options, loop_options = _options(distill), _options(run)
    for flag in model_flags:
        assert (flag in mem_options) and (flag in loop_options), flag
        assert mem_options[flag].help == loop_options[flag].help.replace("HARNESS_LOOP_", "HARNESS_MEM_")  # type: ignore[union-attr]
    every_loop_flag = {opt for p in run.params for opt in p.opts}  # hidden options too
    assert "--base-url" not in every_loop_flag and "--timeout" not in every_loop_flag  # old spellings are gone
    runs_list = loop_cli.commands["runs"].commands["list"]  # type: ignore[attr-defined]
    mem_list = mem_cli.commands["list"]
    assert _options(runs_list)["--json"].help == _options(mem_list)["--json"].help == "One JSON object per line."


@pytest.mark.parametrize(("name", "args", "message"), [
    ("harness-mem", ["skills", "distill", "s-1", "--model", "m"],
     "Error: a model name was given but no server — pass --model-url (or set HARNESS_MEM_MODEL_URL),"
     " e.g. http://127.0.0.1:8000/v1\n"),
    ("harness-loop", ["run", "--model", "m", "hi"],
     "Error: a model name was given but no server — pass --model-url (or set HARNESS_LOOP_MODEL_URL),"
     " e.g. http://127.0.0.1:8000/v1\n"),
    ("harness-loop", ["run", "--model-url", "http://127.0.0.1:9/v1", "hi"],
     "Error: a model server was given (http://127.0.0.1:9/v1) but no model name — pass --model"
     " (or set HARNESS_LOOP_MODEL)\n"),
])
def test_half_a_model_configuration_gets_the_same_hint_in_both(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, args: list[str], message: str
) -> None:
    for var in ("HARNESS_MEM_MODEL_URL", "HARNESS_MEM_MODEL", "HARNESS_LOOP_MODEL_URL", "HARNESS_LOOP_MODEL"):
        monkeypatch.delenv(var, raising=False)
    result = invoke(name, *(["--db", str(db_path), *args] if name == "harness-mem" else args))
    assert (result.exit_code, result.stderr) == (1, message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_loop_reads_its_model_url_from_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = _free_port()
    monkeypatch.setenv("HARNESS_LOOP_MODEL_URL", f"http://127.0.0.1:{port}/v1")
    result = invoke("harness-loop", "run", "--model", "m", "--model-timeout", "2", "--retries", "0", "--no-record",
                    "-w", str(tmp_path), "hi")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: cannot connect to http://127.0.0.1:{port}/v1/chat/completions")


def test_migrate_list_shows_both_sets(db_path: Path) -> None:
    with RunStore.open(db_path) as store:
        store.create(RunRecord(id="r1", goal="g"))
    listing = invoke("harness-mem", "--db", str(db_path), "migrate", "--list")
    assert listing.exit_code == 0
    rows = [line.split(None, 3) for line in listing.stdout.splitlines()]
    assert [(r[0], r[1], r[3].split()[0]) for r in rows] == [
        ("harness_mem", "applied", "0001_init"),
        ("harness_mem", "skipped", "0002_runs"),
        ("harness_mem", "applied", "0003_experience"),
        ("harness_mem", "applied", "0004_vectors"),
        ("harness_mem", "applied", "0005_consolidation"),
        ("harness_mem", "skipped", "0006_run_leases"),
        ("harness_mem", "applied", "0007_memories_view"),
        ("harness_mem", "applied", "0008_vectors_in_vec0"),
        ("harness_mem", "applied", "0009_corrections"),
        ("harness_mem", "applied", "0010_derivations"),
        ("harness_mem", "applied", "0011_updated_and_ttl"),
        ("harness_mem", "applied", "0012_identities"),
        ("harness_mem", "applied", "0013_derived_keywords"),
        ("harness_mem", "applied", "0014_episode_provenance"),
        ("harness_mem", "applied", "0015_sync_log"),
        ("harness_mem", "applied", "0016_entries_by_kind"),
        ("harness_mem", "applied", "0017_entry_counts"),
        ("harness_loop", "applied", "0001_runs"),
        ("harness_loop", "applied", "0002_run_privacy"),
        ("harness_loop", "applied", "0003_job_leases"),
    ]
    assert "0002_runs  (retired: the runs tables moved to the harness_loop migration set)" in listing.stdout

    loop_only = invoke("harness-mem", "--db", str(db_path), "migrate", "--list", "--set", "harness_loop", "--json")
    row, *_ = [json.loads(line) for line in loop_only.stdout.splitlines()]
    assert {k: row[k] for k in ("set", "number", "name", "state")} == {
        "set": "harness_loop", "number": 1, "name": "0001_runs", "state": "applied",
    }

    missing = invoke("harness-mem", "--db", str(db_path), "migrate", "--list", "--set", "nope")
    assert missing.exit_code == 1
    assert missing.stderr == f"Error: no migration set 'nope' in {db_path} — it has: harness_loop, harness_mem\n"
    misuse = invoke("harness-mem", "--db", str(db_path), "migrate", "--set", "harness_loop")
    assert misuse.exit_code == 2 and misuse.stderr.endswith(
        "Error: --set goes with --list: harness-mem applies only its own set\n")


def test_migrate_list_on_a_new_file_shows_what_opening_would_do(db_path: Path) -> None:
    listing = invoke("harness-mem", "--db", str(db_path), "migrate", "--list")
    assert [line.split()[:2] for line in listing.stdout.splitlines()] == [["harness_mem", "pending"]] * 17
    assert not db_path.exists()  # listing is a read: it creates nothing


def test_every_harness_loop_command_has_help_with_an_example() -> None:
    def walk(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        found = [prefix] if prefix else []
        for name, command in group.commands.items():
            found += walk(command, (*prefix, name)) if isinstance(command, click.Group) else [(*prefix, name)]
        return found

    for path in walk(loop_cli):
        result = invoke("harness-loop", *path, "-h")
        assert result.exit_code == 0 and "Example:" in result.stdout, path
