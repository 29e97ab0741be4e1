"""The hook writer (harness_mem.hook_writer) behind `harness-mem hook EVENT`, as real processes.

Every test runs the console script as Claude Code does, with its own runtime directory
(``$HARNESS_MEM_RUNTIME_DIR``); the writers its hooks start are found by pid and stopped after it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hook_writers import (
    is_running,
    listening,
    private_runtime_dir,
    serving,
    stop_writers,
    wait_until,
    writers,
)

from harness_mem import entry, hook_client, hook_writer
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.slow  # every test starts real processes

BIN = Path(sys.executable).parent
SESSION = "5b1e0c2d-7e10-4f0e-9d51-8c35adc12b7e"
HEAVY = ("click", "pydantic", "numpy", "sqlite_utils", "harness_mem.store", "harness_mem.cli")
# Runs the real entry point (python -m harness_mem), then says on stderr which heavy modules it imported.
LAUNCHER = (
    "import atexit, runpy, sys\n"
    f"atexit.register(lambda: sys.stderr.write('LOADED:' + ','.join(m for m in {HEAVY!r} if m in sys.modules)))\n"
    "runpy.run_module('harness_mem', run_name='__main__', alter_sys=True)\n"
)


SHOP = "project:/work/shop"  # the hooks' cwd, no git repository: the project is the directory


@pytest.fixture(autouse=True)
def runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with private_runtime_dir(monkeypatch) as directory:
        yield directory


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    with MemoryStore(path, embedder=None) as store:
        store.add("we deploy the shop with `make ship`, never by hand", kind="fact", tags=[SHOP])
    return path


def prompt(text: str, session: str = SESSION) -> dict[str, Any]:
    return {"session_id": session, "cwd": "/work/shop", "hook_event_name": "UserPromptSubmit", "prompt": text}


def tool(stdout: str) -> dict[str, Any]:
    return {"session_id": SESSION, "cwd": "/work/shop", "hook_event_name": "PostToolUse", "tool_name": "Bash",
            "tool_input": {"command": "pytest -q"}, "tool_response": {"stdout": stdout, "stderr": ""}}


def reply(tmp_path: Path, text: str) -> dict[str, Any]:
    transcript = tmp_path / f"transcript-{abs(hash(text))}.jsonl"
    transcript.write_text(json.dumps({"type": "user", "message": {"content": "go"}}) + "\n"
                          + json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}})
                          + "\n", encoding="utf-8")
    return {"session_id": SESSION, "cwd": "/work/shop", "hook_event_name": "Stop", "transcript_path": str(transcript)}


def hook(tmp_path: Path, event: str, db: Path, stdin: bytes | dict[str, Any], *extra: str, watch: bool = False,
         environ: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    data = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode()
    args = ["hook", event, "--db", str(db), *extra]
    command = [sys.executable, "-c", LAUNCHER, *args] if watch else [str(BIN / "harness-mem"), *args]
    env = dict(os.environ, HF_HUB_OFFLINE="1", **(environ or {}))
    env.pop("HARNESS_MEM_RAISE_ERRORS", None)  # a real hook shows one line, never a traceback
    done = subprocess.run(command, input=data, capture_output=True, env=env, cwd=tmp_path, timeout=60, check=False)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def stored(path: Path, namespace: str = "default") -> list[Any]:
    with MemoryStore(path, namespace=namespace, embedder=None) as store:
        return list(store.list(session=SESSION))


def start_writer(tmp_path: Path, db: Path, runtime_dir: Path) -> int:
    """A writer for ``db``, brought up by a SessionStart hook as at the start of a session: its pid."""
    done = hook(tmp_path, "SessionStart", db, {"session_id": "opening", "cwd": "/work/shop"})
    assert done.returncode == 0, done.stderr
    (pid,) = serving(runtime_dir).values()
    return pid


def comparable(entry: Any) -> dict[str, Any]:
    return {k: v for k, v in entry.to_dict().items() if k not in ("id", "created_at", "updated_at")}


# ---- what a writer stores ------------------------------------------------------------------------


def test_a_capture_through_the_writer_stores_exactly_what_the_in_process_path_stores(
        tmp_path: Path, db: Path, runtime_dir: Path) -> None:
    alone = tmp_path / "alone.db"
    shutil.copy(db, alone)  # the same file (its redaction secret included) for the in-process path
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)  # a runtime directory others may enter: the hook uses no writer there
    loose.chmod(0o755)
    start_writer(tmp_path, db, runtime_dir)
    payloads = [("UserPromptSubmit", prompt("the total rounds wrong, ask ada@example.com")),
                ("PostToolUse", tool("3 passed in 0.41s\n" + "x" * 5000)),
                ("Stop", reply(tmp_path, "Fixed: totals round half-even."))]
    for event, payload in payloads:
        served = hook(tmp_path, event, db, payload, watch=True)
        assert (served.returncode, served.stdout, served.stderr) == (0, "", "LOADED:")  # no click, no store
        direct = hook(tmp_path, event, alone, payload, environ={"HARNESS_MEM_RUNTIME_DIR": str(loose)})
        assert (direct.returncode, direct.stdout, direct.stderr) == (0, "", "")
    assert list(loose.iterdir()) == []  # no writer, no socket
    through_writer, in_process = stored(db), stored(alone)
    assert [t.role for t in through_writer] == ["user", "tool", "assistant"]
    assert through_writer[0].content == "the total rounds wrong, ask <EMAIL>"
    assert [comparable(t) for t in through_writer] == [comparable(t) for t in in_process]


def test_session_start_through_the_writer_sees_what_other_processes_added(tmp_path: Path, db: Path,
                                                                          runtime_dir: Path) -> None:
    start_writer(tmp_path, db, runtime_dir)
    with MemoryStore(db, embedder=None) as store:
        store.add("payments go through the ledger service", kind="fact", tags=[SHOP])
    done = hook(tmp_path, "SessionStart", db, {"session_id": "s2", "cwd": "/work/shop"}, watch=True)
    assert done.returncode == 0 and done.stderr == "LOADED:"
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "ledger service" in context and "make ship" in context


# ---- no writer, a killed writer, a writer that committed but never acked ------------------------


def test_a_hook_with_no_writer_stores_its_turn_and_leaves_a_writer_running(tmp_path: Path, db: Path,
                                                                           runtime_dir: Path) -> None:
    assert writers(runtime_dir) == []
    done = hook(tmp_path, "UserPromptSubmit", db, prompt("first of the session"))
    assert done.returncode == 0, done.stderr
    assert [t.content for t in stored(db)] == ["first of the session"]
    (pid,) = serving(runtime_dir).values()
    assert oct(runtime_dir.stat().st_mode & 0o777) == "0o700"
    (sock,) = runtime_dir.glob("*.sock")
    assert oct(sock.stat().st_mode & 0o777) == "0o600"
    second = hook(tmp_path, "UserPromptSubmit", db, prompt("second of the session"), watch=True)
    assert second.returncode == 0 and second.stderr == "LOADED:"  # served by that writer
    assert [t.content for t in stored(db)] == ["first of the session", "second of the session"]
    assert listening(runtime_dir) == {sock.name: pid}


def test_a_killed_writer_loses_no_turn_and_a_new_one_comes_up(tmp_path: Path, db: Path, runtime_dir: Path) -> None:
    first = start_writer(tmp_path, db, runtime_dir)
    os.kill(first, signal.SIGKILL)
    assert wait_until(lambda: not is_running(first))
    assert list(runtime_dir.glob("*.sock"))  # stale: no one listens
    done = hook(tmp_path, "UserPromptSubmit", db, prompt("asked while no writer ran"))
    assert done.returncode == 0, done.stderr
    assert [t.content for t in stored(db)] == ["asked while no writer ran"]
    (second,) = serving(runtime_dir).values()
    assert second != first
    after = hook(tmp_path, "UserPromptSubmit", db, prompt("asked of the new writer"), watch=True)
    assert after.returncode == 0 and after.stderr == "LOADED:"
    assert [t.content for t in stored(db)] == ["asked while no writer ran", "asked of the new writer"]


def test_a_turn_the_writer_committed_but_never_acked_is_not_stored_twice(tmp_path: Path, db: Path,
                                                                         runtime_dir: Path) -> None:
    pid = start_writer(tmp_path, db, runtime_dir)
    payload = json.dumps(tool("1 failed")).encode()
    # The writer commits; then it dies before the hook has its ack, so the hook stores the turn itself.
    assert hook_client.ask(str(db.resolve()), "default", "PostToolUse", payload) == hook_client.Reply()
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not is_running(pid))
    done = hook(tmp_path, "PostToolUse", db, payload)
    assert done.returncode == 0, done.stderr
    assert [t.content for t in stored(db)] == ['[Bash] {"command":"pytest -q"}\n1 failed']


# Holds the file's write lock, as a long `gc --vacuum` does, until its stdin closes.
HOLD_LOCK = (
    "import sqlite3, sys\n"
    "connection = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "connection.execute('BEGIN IMMEDIATE')\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
    "connection.execute('ROLLBACK')\n"
)


def test_a_writer_held_up_by_the_write_lock_never_holds_a_hook_and_stores_each_turn_once(
        tmp_path: Path, db: Path, runtime_dir: Path) -> None:
    start_writer(tmp_path, db, runtime_dir)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdin is not None
    turns = [("UserPromptSubmit", prompt("asked while gc held the lock")), ("PostToolUse", tool("3 passed")),
             ("Stop", reply(tmp_path, "all green now")), ("PostToolUse", tool("3 passed"))]
    try:
        assert holder.stdout.readline() == b"held\n"
        for event, payload in turns:
            done = hook(tmp_path, event, db, payload, watch=True)
            # Back while the lock is still held, without the CLI: the hook neither waited for the lock
            # nor wrote the turn itself (before, it gave the writer 5 s, then waited in process).
            assert done.returncode == 0 and done.stdout == "" and done.stderr == "LOADED:", done.stderr
        assert holder.poll() is None
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
        holder.stdout.close()
    expected = ["asked while gc held the lock", '[Bash] {"command":"pytest -q"}\n3 passed', "all green now",
                '[Bash] {"command":"pytest -q"}\n3 passed']  # the same result twice, apart: two turns
    assert wait_until(lambda: len(stored(db)) >= len(expected), timeout=180)
    # Stored by the writer alone, once each (the hooks had left; their detached copies had the acks).
    assert [t.content for t in stored(db)] == expected
    after = hook(tmp_path, "UserPromptSubmit", db, prompt("and once the lock is free"), watch=True)
    assert after.returncode == 0 and after.stderr == "LOADED:"
    assert [t.content for t in stored(db)][-1] == "and once the lock is free"


def test_a_lock_held_past_the_writers_busy_timeout_still_stores_the_turn_once(tmp_path: Path, db: Path,
                                                                            runtime_dir: Path) -> None:
    start_writer(tmp_path, db, runtime_dir)
    with subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == b"held\n"
        done = hook(tmp_path, "PostToolUse", db, tool("5 passed"), watch=True)
        assert done.returncode == 0 and done.stderr == "LOADED:", done.stderr
        # Past the writer's busy timeout (30 s): its write fails with "database is locked", which the
        # hook's detached copy must not take for an ack.
        held_until = time.monotonic() + 40
        while time.monotonic() < held_until:
            time.sleep(1)
        holder.stdin.close()
    assert wait_until(lambda: len(stored(db)) >= 1, timeout=180)
    assert wait_until(lambda: False, timeout=3) is False  # time for a second copy to show, were there one
    assert [t.content for t in stored(db)] == ['[Bash] {"command":"pytest -q"}\n5 passed']


def test_a_held_up_writer_killed_before_its_ack_loses_no_turn_and_stores_none_twice(
        tmp_path: Path, db: Path, runtime_dir: Path) -> None:
    first = start_writer(tmp_path, db, runtime_dir)
    with subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == b"held\n"
        done = hook(tmp_path, "PostToolUse", db, tool("2 failed"), watch=True)
        assert done.returncode == 0 and done.stderr == "LOADED:", done.stderr
        os.kill(first, signal.SIGKILL)  # before it could store the turn: the lock is still held
        assert wait_until(lambda: not is_running(first))
        holder.stdin.close()
    # The hook's detached copy saw the writer go without an ack and asked a new one.
    assert wait_until(lambda: len(stored(db)) >= 1, timeout=180)
    assert [t.content for t in stored(db)] == ['[Bash] {"command":"pytest -q"}\n2 failed']
    assert wait_until(lambda: bool(listening(runtime_dir))) and first not in listening(runtime_dir).values()


def test_a_hook_answering_in_process_returns_within_budget_while_the_lock_is_held(tmp_path: Path, db: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)  # a runtime directory others may enter: no writer, the hook answers in process
    with subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(db)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == b"held\n"
        done = hook(tmp_path, "PostToolUse", db, tool("4 passed"), environ={"HARNESS_MEM_RUNTIME_DIR": str(loose)})
        # Back while the lock is held (before, it waited the busy timeout, 30 s, then failed: status 1
        # and the turn lost, or killed by the host at 10 s).
        assert done.returncode == 0 and done.stdout == "", done.stderr
        assert done.stderr.count("\n") == 1 and "being stored in the background" in done.stderr
        assert holder.poll() is None
        holder.stdin.close()
    assert wait_until(lambda: len(stored(db)) >= 1, timeout=120)
    assert [t.content for t in stored(db)] == ['[Bash] {"command":"pytest -q"}\n4 passed']


# ---- one writer per store ------------------------------------------------------------------------


def test_two_namespaces_and_two_files_get_separate_writers_and_nothing_crosses(tmp_path: Path, db: Path,
                                                                               runtime_dir: Path) -> None:
    other = tmp_path / "other.db"
    shutil.copy(db, other)
    targets = [(db, "default"), (db, "team-a"), (other, "default")]
    for path, namespace in targets:  # the first starts the writer, the second is served by it
        for n in (1, 2):
            done = hook(tmp_path, "UserPromptSubmit", path, prompt(f"{path.name} {namespace} {n}"),
                        "--namespace", namespace)
            assert done.returncode == 0, done.stderr
        assert wait_until(lambda: len(listening(runtime_dir)) == targets.index((path, namespace)) + 1)  # noqa: B023
    assert len(set(listening(runtime_dir).values())) == 3
    for path, namespace in targets:
        assert [t.content for t in stored(path, namespace)] == [f"{path.name} {namespace} {n}" for n in (1, 2)]


def test_a_writer_whose_file_was_replaced_hands_the_hook_back(tmp_path: Path, db: Path, runtime_dir: Path) -> None:
    pid = start_writer(tmp_path, db, runtime_dir)
    db.unlink()
    for leftover in tmp_path.glob("memory.db-*"):
        leftover.unlink()
    MemoryStore(db, embedder=None).close()  # a new file at the same path
    done = hook(tmp_path, "UserPromptSubmit", db, prompt("into the new file"))
    assert done.returncode == 0, done.stderr
    assert [t.content for t in stored(db)] == ["into the new file"]
    assert wait_until(lambda: not is_running(pid))  # the old writer stepped down


# ---- sockets and directories that are not a writer's ---------------------------------------------


def test_a_stale_socket_or_a_plain_file_at_the_socket_is_replaced(tmp_path: Path, db: Path,
                                                                  runtime_dir: Path) -> None:
    path = Path(hook_client.socket_path(str(db.resolve()), "default") or "")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, no one listens
    done = hook(tmp_path, "UserPromptSubmit", db, prompt("past a stale socket"))
    assert done.returncode == 0, done.stderr
    serving(runtime_dir)
    stop_writers(runtime_dir)
    assert not path.exists()  # a writer told to stop removes its socket
    path.write_text("not a socket")
    done = hook(tmp_path, "UserPromptSubmit", db, prompt("past a plain file"))
    assert done.returncode == 0, done.stderr
    serving(runtime_dir)
    assert path.is_socket()
    assert [t.content for t in stored(db)] == ["past a stale socket", "past a plain file"]


def test_a_listener_that_never_answers_costs_a_turn_nothing(tmp_path: Path, db: Path, runtime_dir: Path) -> None:
    path = hook_client.socket_path(str(db.resolve()), "default")
    assert path is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as impostor:
        impostor.bind(path)
        impostor.listen(1)  # accepts into its backlog, reads nothing, closes without a word
        done = hook(tmp_path, "UserPromptSubmit", db, prompt("past a silent listener"))
    assert done.returncode == 0, done.stderr
    # The listener took the request and never acked: the hook's detached copy, seeing it close,
    # asked a writer it started.
    assert wait_until(lambda: [t.content for t in stored(db)] == ["past a silent listener"], timeout=120)


def test_a_runtime_directory_others_may_enter_is_not_used(tmp_path: Path, db: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    done = hook(tmp_path, "UserPromptSubmit", db, prompt("kept without a writer"),
                environ={"HARNESS_MEM_RUNTIME_DIR": str(shared)})
    assert done.returncode == 0, done.stderr
    assert [t.content for t in stored(db)] == ["kept without a writer"]
    assert list(shared.iterdir()) == []


# ---- idle, errors --------------------------------------------------------------------------------


def test_the_writer_exits_after_its_idle_timeout_and_removes_its_socket(tmp_path: Path, db: Path,
                                                                        runtime_dir: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hook_writer.IDLE_ENV, "1")
    done = hook(tmp_path, "SessionStart", db, {"session_id": "opening", "cwd": "/work/shop"})
    assert done.returncode == 0, done.stderr
    # The writer writes its pid into its lock file once it listens; it may be gone again before a
    # busy machine lets this test look for its socket, so the lock file is what is waited for.
    assert wait_until(lambda: [p.read_text().strip() for p in runtime_dir.glob("*.lock")] not in ([], [""]), timeout=90)
    (lock,) = runtime_dir.glob("*.lock")
    pid = int(lock.read_text())
    assert wait_until(lambda: not is_running(pid), timeout=60)
    assert list(runtime_dir.glob("*.sock")) == []


@pytest.mark.parametrize("stdin", [b"not json at all", b"\xff\xfe{", b'{"prompt": "no session"}'])
def test_bad_input_through_the_writer_is_the_same_one_line_and_nothing_stored(tmp_path: Path, db: Path,
                                                                              runtime_dir: Path, stdin: bytes) -> None:
    start_writer(tmp_path, db, runtime_dir)
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    served = hook(tmp_path, "UserPromptSubmit", db, stdin, watch=True)
    direct = hook(tmp_path, "UserPromptSubmit", db, stdin, environ={"HARNESS_MEM_RUNTIME_DIR": str(loose)})
    assert served.returncode == direct.returncode == 1  # never 2, which would block Claude Code
    assert served.stderr == direct.stderr + "LOADED:"  # the same line, and no CLI imported
    assert direct.stderr.startswith("Error: ") and direct.stderr.count("\n") == 1
    with MemoryStore(db, embedder=None) as store:
        assert store.count() == 1


# ---- what a Stop hook reads ----------------------------------------------------------------------


def test_a_transcript_path_that_is_no_regular_file_is_refused_in_a_line_and_wedges_nothing(
        tmp_path: Path, db: Path, runtime_dir: Path) -> None:
    fifo = tmp_path / "transcript.fifo"
    os.mkfifo(fifo)
    pointer = tmp_path / "pointer.jsonl"
    pointer.symlink_to(fifo)
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)  # a runtime directory others may enter: the hook answers in process
    start_writer(tmp_path, db, runtime_dir)
    cases = [(fifo, "a FIFO"), (pointer, "a FIFO"), (Path("/dev/zero"), "a character device"),
             (tmp_path, "a directory")]
    for n, (path, kind) in enumerate(cases):
        for where in ({}, {"HARNESS_MEM_RUNTIME_DIR": str(loose)}):  # through the writer, and in process
            payload = {"session_id": SESSION, "cwd": "/work/shop", "hook_event_name": "Stop",
                       "transcript_path": str(path), "last_assistant_message": f"reply {n} {bool(where)}"}
            # A FIFO read would wait for a writer for ever and /dev/zero never ends: the hook's
            # subprocess timeout (60 s) is what would fail here.
            done = hook(tmp_path, "Stop", db, payload, environ=where)
            assert done.returncode == 0 and done.stdout == "", (path, done.stderr)
            assert done.stderr.count("\n") == 1 and f"is {kind}, not a regular file" in done.stderr, (path, done.stderr)
    # The writer was never wedged: it still answers, and every reply came from the payload instead.
    after = hook(tmp_path, "UserPromptSubmit", db, prompt("still served"), watch=True)
    assert after.returncode == 0 and after.stderr == "LOADED:"
    assert [t.content for t in stored(db)] == [
        *(f"reply {n} {where}" for n in range(len(cases)) for where in (False, True)), "still served"]


# ---- the command lines the fast path takes ------------------------------------------------------


@pytest.mark.parametrize(("argv", "expected"), [
    (["hook", "Stop"], entry.HookCall("Stop")),
    (["hook", "Stop", "--db", "/m.db", "--namespace", "team"], entry.HookCall("Stop", "/m.db", "team")),
    (["hook", "--db=/m.db", "Stop"], entry.HookCall("Stop", "/m.db")),
    (["--db", "/a.db", "-N", "t", "hook", "Stop"], entry.HookCall("Stop", top_db="/a.db", top_namespace="t")),
    (["hook", "Stop", "--db", "/a.db", "--db", "/b.db"], entry.HookCall("Stop", "/b.db")),
])
def test_the_forms_hooks_install_writes_take_the_fast_path(argv: list[str], expected: entry.HookCall) -> None:
    assert entry.hook_call(argv) == expected


@pytest.mark.parametrize("argv", [
    [], ["list"], ["hook"], ["hook", "--help"], ["hook", "Stop", "extra"], ["--no-redact", "hook", "Stop"],
    ["hook", "Stop", "--db"], ["hook", "Stop", "-N", "t"], ["hooks", "install", "claude-code"], ["--", "hook", "Stop"],
])
def test_every_other_command_line_goes_to_the_cli(argv: list[str]) -> None:
    assert entry.hook_call(argv) is None


@pytest.mark.real_model
def test_a_turn_stored_through_the_writer_is_found_by_meaning_without_a_reindex(tmp_path: Path,
                                                                                  runtime_dir: Path) -> None:
    db = tmp_path / "vectors.db"
    with MemoryStore(db) as store:  # a file with the model's vectors
        store.add("the staging database listens on port 5433")
    start_writer(tmp_path, db, runtime_dir)
    done = hook(tmp_path, "UserPromptSubmit", db, prompt("We settled on argon2id to hash the passwords."))
    assert done.returncode == 0, done.stderr

    def found() -> bool:
        with MemoryStore(db) as store:
            if store.count_missing_vectors():
                return False
            hits = store.recall("how are credentials stored", k=1, mode="semantic")
            return bool(hits) and "argon2id" in hits[0].entry.content

    deadline = time.monotonic() + 300  # the writer loads the model first: seconds on a busy machine
    while not found() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert found()


@pytest.mark.real_model
def test_what_a_session_end_derives_in_the_background_gets_its_vectors_with_no_further_hook(
        tmp_path: Path, runtime_dir: Path) -> None:
    db = tmp_path / "vectors.db"
    MemoryStore(db).close()  # a file with the model's vectors
    start_writer(tmp_path, db, runtime_dir)
    assert hook(tmp_path, "UserPromptSubmit", db, prompt("We'll use Postgres for billing.")).returncode == 0

    def missing() -> int:
        with MemoryStore(db, embedder=None) as store:
            return store.storage.missing_vectors()

    def facts() -> list[str]:
        with MemoryStore(db, embedder=None) as store:
            return [e.content for e in store.list(kind="fact")]

    def wait_for(condition: Any) -> bool:
        deadline = time.monotonic() + 300  # the writer loads the model first: seconds on a busy machine
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.5)
        return bool(condition())

    assert wait_for(lambda: missing() == 0)  # the prompt, embedded by the writer
    done = hook(tmp_path, "SessionEnd", db, {"session_id": SESSION, "cwd": "/work/shop", "reason": "logout"})
    assert done.returncode == 0, done.stderr
    assert wait_for(lambda: facts() == ["The team will use Postgres for billing."])
    # The consolidation ran in its own process, without the model: the writer embeds what it derived.
    assert wait_for(lambda: missing() == 0)


def test_an_event_named_like_the_writers_own_request_is_still_refused_in_one_line(tmp_path: Path, db: Path,
                                                                                   runtime_dir: Path) -> None:
    start_writer(tmp_path, db, runtime_dir)
    done = hook(tmp_path, hook_client.EMBED_PURPOSE, db, b"")
    assert done.returncode == 1 and done.stderr.startswith("Error: unknown hook event 'embed'"), done.stderr
    assert done.stderr.count("\n") == 1
