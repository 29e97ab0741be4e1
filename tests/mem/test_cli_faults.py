"""Hostile input to the real ``harness-mem`` process (#24): every case is one ``Error:`` line and a
non-zero exit, never a traceback or "report it", with what was stored before left intact.

- Reads of stdin and files are bounded: ``/dev/zero`` is refused after a few megabytes (the
  process runs under a 1 GiB address-space limit, so an unbounded read fails the test fast).
- Errors that quote their input are redacted, on the command line and in MCP tool errors.
- The faults that hostile values reach below the library's checks (too-large numbers, deep
  nesting, bytes that are not UTF-8 or an output that cannot encode, a damaged file) each get a
  line that says what to do.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest
from click.testing import CliRunner
from fake_embedder import _LAUNCHER

from harness_mem.cli import cli as mem_cli
from harness_mem.store import MemoryStore

SECRET_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key: detected as an API key
PASSWORD = "password=Hunter2xyz!"
AS_LIMIT = 1 << 30  # an unbounded read of /dev/zero hits this within a second


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def harness_mem(*args: str | bytes, stdin: bytes | IO[bytes] | None = None,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``harness-mem ARGS`` in a new process, as a user runs it (no ``*_RAISE_ERRORS``), with the
    test embedder and at most :data:`AS_LIMIT` bytes of address space."""
    run_env = {k: v for k, v in os.environ.items() if k != "HARNESS_MEM_RAISE_ERRORS"}
    run_env.update(env or {})
    data = stdin if isinstance(stdin, bytes) or stdin is None else None
    return subprocess.run([sys.executable, "-c", _LAUNCHER, *args], input=data,
                          stdin=None if data is not None or stdin is None else stdin,
                          capture_output=True, env=run_env, timeout=120, preexec_fn=_limit_memory)


def one_error_line(result: subprocess.CompletedProcess[bytes], code: int = 1) -> str:
    """The one ``Error:`` line of a failed run, checked for the exit status and for no traceback."""
    err = result.stderr.decode("utf-8", "backslashreplace")
    assert result.returncode == code, (result.returncode, err[-2000:])
    assert "Traceback" not in err and "report it" not in err, err[-2000:]
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, err[-2000:]
    return errors[0]


@pytest.fixture(scope="module")
def stored_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with three entries (one with a non-ASCII character), imported by the real process once."""
    db = tmp_path_factory.mktemp("stored") / "m.db"
    lines = [{"id": f"e{i}", "text": f"entry {i} → kept", "session": "s1"} for i in range(3)]
    result = harness_mem("--db", str(db), "import", "-", stdin="".join(json.dumps(x) + "\n" for x in lines).encode())
    assert result.returncode == 0, result.stderr
    assert not db.with_name("m.db-wal").exists()  # the process closed it: the file alone is the store
    return db


@pytest.fixture
def stored(stored_once: Path, tmp_path: Path) -> Path:
    """A copy of that store, for one test to attack and check it survives."""
    return Path(shutil.copy(stored_once, tmp_path / "m.db"))


def assert_intact(db: Path) -> None:
    # Read in this process: what the file holds is the point, not how a process reads it.
    listed = CliRunner().invoke(mem_cli, ["--db", str(db), "list", "--json"], catch_exceptions=False)
    assert listed.exit_code == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["e0", "e1", "e2"]


# ---- bounded reads -------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["add", "-"], "Error: stdin holds more than 4,000,000 bytes, more than an entry may (1,000,000 characters)"
                   " — split it into several entries"),
    (["redact"], "Error: stdin holds more than 4,000,000 bytes, more than an entry may (1,000,000 characters)"
                 " — redact a longer text in parts"),
    (["eval", "-"], "Error: query line 1: longer than 1,048,576 bytes — shorten it"),
    (["eval", "/dev/zero"], "Error: query line 1: longer than 1,048,576 bytes — shorten it"),
])
def test_an_endless_input_is_refused_after_its_limit(stored: Path, args: list[str], message: str) -> None:
    with open("/dev/zero", "rb") as zeros:
        result = harness_mem("--db", str(stored), *args, stdin=zeros)
    assert one_error_line(result) == message
    assert_intact(stored)


def test_a_query_file_is_refused_past_its_total_limit(stored: Path, tmp_path: Path) -> None:
    from harness_mem.evaluate import MAX_QUERY_FILE_BYTES

    line = json.dumps({"question": "q " * 400, "evidence": ["e1"]}).encode() + b"\n"
    queries = tmp_path / "q.jsonl"
    with queries.open("wb") as out:
        for _ in range(MAX_QUERY_FILE_BYTES // len(line) + 1):
            out.write(line)
    result = harness_mem("--db", str(stored), "eval", str(queries))
    assert one_error_line(result) == f"Error: the query file is longer than {MAX_QUERY_FILE_BYTES:,} bytes — split it"


# ---- redacted errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "code", "message"), [
    (["list", "--kind", PASSWORD], 1,
     "Error: unknown kind 'password=<SECRET>' — use one of: note, turn, episode, fact, summary"),
    (["get", SECRET_ID], 1,
     "Error: no entry with id '<API_KEY>' in namespace 'default' — `harness-mem list` shows the ids"),
    (["delete", SECRET_ID], 1,
     "Error: no entry with id '<API_KEY>' in namespace 'default' — `harness-mem list` shows ids"),
    (["recall", "x", "--mode", SECRET_ID], 2,
     "Error: Invalid value for '--mode': '<API_KEY>' is not one of 'hybrid', 'keyword', 'semantic'."),
    ([SECRET_ID], 2, "Error: No such command '<API_KEY>'."),
    (["--embedder", SECRET_ID, "list"], 2,
     "Error: Invalid value for '--embedder': '<API_KEY>' is not one of 'auto', 'none', 'minilm', 'minilm-int8', 'minilm-int8s'."),
    # glued to a name by "_" or "-", as keys are in ids and variable names (issue #41, item 12)
    (["get", f"prod_{SECRET_ID}"], 1,
     "Error: no entry with id 'prod_<API_KEY>' in namespace 'default' — `harness-mem list` shows the ids"),
    (["recall", "x", "--mode", f"--{SECRET_ID}"], 2,
     "Error: Invalid value for '--mode': '--<API_KEY>' is not one of 'hybrid', 'keyword', 'semantic'."),
])
def test_errors_that_quote_their_input_are_redacted(stored: Path, args: list[str], code: int, message: str) -> None:
    result = harness_mem("--db", str(stored), *args)
    assert one_error_line(result, code) == message
    assert SECRET_ID.encode() not in result.stderr and b"Hunter2" not in result.stderr


def test_import_line_errors_are_redacted(stored: Path) -> None:
    line = json.dumps({"id": "e9", "text": "x", "kind": PASSWORD}).encode() + b"\n"
    result = harness_mem("--db", str(stored), "import", "-", stdin=line)
    assert one_error_line(result) == (
        "Error: line 1: unknown kind 'password=<SECRET>' — use one of: note, turn, episode, fact, summary")
    assert b"Hunter2" not in result.stderr
    assert_intact(stored)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_tool_errors_are_redacted(stored: Path) -> None:
    mcp = pytest.importorskip("mcp")
    params = mcp.StdioServerParameters(command=sys.executable, args=["-c", _LAUNCHER, "mcp", "--db", str(stored)],
                                       env=dict(os.environ))
    async with mcp.Client(params, read_timeout_seconds=120) as client:
        for tool, arguments in [("get_memory", {"id": SECRET_ID}), ("forget", {"id": SECRET_ID}),
                                ("update_memory", {"id": SECRET_ID, "content": "x"})]:
            result: Any = await client.call_tool(tool, arguments)
            assert result.is_error
            text = result.content[0].text
            assert SECRET_ID not in text and "no entry with id '<API_KEY>'" in text, text
    assert_intact(stored)


# ---- faults below the library's checks -----------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["list", "--limit", "99999999999999999999"],
     "Error: Invalid value for '--limit' / '-n': 99999999999999999999 is not in the range 1<=x<=1000000000000."),
    (["sessions", "list", "--offset", "99999999999999999999"],
     "Error: Invalid value for '--offset': 99999999999999999999 is not in the range 0<=x<=1000000000000."),
    (["sessions", "show", "s1", "--offset", "99999999999999999999"],
     "Error: Invalid value for '--offset': 99999999999999999999 is not in the range 0<=x<=1000000000000."),
    (["episodes", "list", "-n", "99999999999999999999"],
     "Error: Invalid value for '--limit' / '-n': 99999999999999999999 is not in the range 1<=x<=1000000000000."),
    (["import", "--workers", "99999999999999999999", "-"],
     "Error: Invalid value for '--workers': 99999999999999999999 is not in the range 0<=x<=64."),
    (["recall", "entry", "--min-score", "nan"], "Error: Invalid value for '--min-score': 'nan' is not a finite number"),
    (["skills", "distill", "x", "--model-url", "http://127.0.0.1:9/v1", "--model", "m", "--model-timeout", "nan"],
     "Error: Invalid value for '--model-timeout': 'nan' is not a finite number"),
    (["skills", "distill", "x", "--model-url", "http://127.0.0.1:9/v1", "--model", "m", "--model-timeout", "inf"],
     "Error: Invalid value for '--model-timeout': inf is not in the range 0<x<=86400.0."),
])
def test_numbers_out_of_range_are_usage_errors(stored: Path, args: list[str], message: str) -> None:
    result = harness_mem("--db", str(stored), *args, stdin=b'{"text": "one"}\n' * 3)
    assert one_error_line(result, 2) == message
    assert_intact(stored)


def test_deeply_nested_query_json_is_one_line(stored: Path, tmp_path: Path) -> None:
    queries = tmp_path / "q.jsonl"
    depth = 100_000
    queries.write_text('{"question": "q", "evidence": ' + "[" * depth + "]" * depth + "}\n")
    result = harness_mem("--db", str(stored), "eval", str(queries))
    assert one_error_line(result) == "Error: query line 1: nested more than 64 levels deep — flatten it"


@pytest.mark.parametrize("args", [
    [b"-N", b"caf\xe9", b"list"],
    [b"get", b"\xe9\xff"],
    [b"supersede", b"\xe9", b"new text"],
    [b"sessions", b"show", b"\xe9"],
])
def test_arguments_that_are_not_utf8_are_one_line(stored: Path, args: list[bytes]) -> None:
    result = harness_mem(b"--db", str(stored).encode(), *args)
    line = one_error_line(result)
    assert line.startswith("Error: an argument or environment variable is not valid UTF-8 (byte e9")
    assert line.endswith(") — pass text as UTF-8")
    assert_intact(stored)


def test_output_the_terminal_cannot_encode_is_one_line(stored: Path) -> None:
    result = harness_mem("--db", str(stored), "list", env={"PYTHONIOENCODING": "latin-1"})
    # stderr is latin-1 too: Python writes what it lacks (the dash) as an escape there.
    assert one_error_line(result) == (
        "Error: cannot write '\\u2192' in latin-1, the output's encoding \\u2014 set PYTHONIOENCODING=utf-8"
        " or use a UTF-8 locale")
    assert_intact(stored)


def _page_of(data: bytes, text: bytes) -> int:
    """The number (from 0) of the page where ``text`` first is."""
    at = data.find(text)
    assert at >= 0, text
    return at // 4096


def test_a_database_damaged_inside_is_one_line_and_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "big.db"
    lines = "".join(json.dumps({"id": f"e{i}", "text": f"entry {i} about deploys " * 5, "session": f"s{i % 50}"})
                    + "\n" for i in range(3000))
    assert harness_mem("--db", str(db), "--embedder", "none", "import", "-", stdin=lines.encode()).returncode == 0
    assert harness_mem("--db", str(db), "gc").returncode == 0  # everything in the main file, none in the WAL
    data = bytearray(db.read_bytes())
    # The page of one of session s3's entries, which `list` reads and `forget --session s3` writes;
    # the entries checked below are on other pages.
    page = _page_of(data, b"entry 1003 about deploys entry 1003")
    assert page not in {_page_of(data, f"entry {i} about deploys entry {i} ".encode()) for i in (3, 53, 2953)}
    data[page * 4096:(page + 1) * 4096] = b"\xff" * 4096
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(bytes(data))
    listed = harness_mem("--db", str(damaged), "list")
    forgot = harness_mem("--db", str(damaged), "forget", "--session", "s3")
    damage = ("Error: the database file is damaged (database disk image is malformed) — `harness-mem doctor`"
              " checks it; restore a backup, or salvage it with `sqlite3 FILE .recover`")
    assert one_error_line(listed) == damage
    assert one_error_line(forgot) == damage
    # The write was rolled back whole: every entry of the session is still there, not forgotten
    # (read in this process: one CLI process for each would prove no more).
    with MemoryStore(damaged, embedder=None, read_only=True) as store:
        assert [store.get(entry_id).session for entry_id in ("e3", "e53", "e2953")] == ["s3"] * 3


def test_the_shared_error_mapper_gives_harness_loop_the_same_lines(tmp_path: Path) -> None:
    """A store error in harness-loop is the line harness-mem gives for it (one mapper for both)."""
    foreign = tmp_path / "notes.db"
    foreign.write_text("not a database, a text file someone named .db\n" * 200)
    code = "import sys; from harness_loop.cli import main; sys.argv[0] = 'harness-loop'; main()"
    result = subprocess.run([sys.executable, "-c", code, "runs", "--db", str(foreign), "list"],
                            capture_output=True, timeout=120,
                            env={k: v for k, v in os.environ.items() if not k.endswith("_RAISE_ERRORS")})
    line = one_error_line(result)
    assert line == one_error_line(harness_mem("--db", str(foreign), "list"))
    assert "Traceback" not in result.stderr.decode() and foreign.read_text().startswith("not a database")


def test_an_empty_db_option_is_named_as_empty() -> None:
    result = harness_mem("--db", "", "list")
    assert one_error_line(result, 2) == (
        "Error: Invalid value for '--db': is empty — name a database file (or a postgresql:// URL)")
