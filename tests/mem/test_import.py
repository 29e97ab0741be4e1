"""JSONL import: in one process or with worker processes, the same entries, index and report."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from engine_rows import keyword_holders
from fake_embedder import cli_process
from worker_helpers import kill_on_marker

from harness_mem import jsonl
from harness_mem.cli import cli
from harness_mem.errors import DuplicateIdError, InvalidInputError, StorageError
from harness_mem.jsonl import export_jsonl, import_jsonl
from harness_mem.redaction import Detector, Redactor, Rule, default_detectors
from harness_mem.rows import prepare_row
from harness_mem.store import MemoryStore

LINES = [
    b'{"id": "n1", "text": "we chose argon2id", "tags": ["decision"], "source": "chat", "metadata": {"t": 42},'
    b' "created_at": "2024-01-02T03:04:05.678Z"}',
    b'{"id": "t1", "text": "mail me at ann@example.com", "role": "user", "session": "s", "timestamp": "2024-01-02T03:05:00Z"}',
    b"",
    b"{broken",
    b'{"id": "t2", "text": "done", "role": "assistant", "session": "s", "timestamp": "2024-01-02T03:06:00Z",'
    b' "dia_id": "D1:2"}',
    b'{"text": "bad kind", "kind": "diary"}',
    b'{"id": "t1", "text": "same id again", "role": "user", "session": "s"}',
    b'{"text": "x", "session": "s\\ud800"}',
    b'{"id": "t3", "text": "and the card 4111 1111 1111 1111", "role": "user", "session": "s",'
    b' "timestamp": "2024-01-02T03:07:00Z"}',
]


# Every test here that writes a store runs on both engines: ``store`` is conftest's ``engine_store``,
# and a test that opens stores of its own opens them at ``engine_target`` (or ``fresh_target()``).
# Those about the import's worker processes (when one starts, the CLI's --workers, a killed import's
# workers, a worker's parsing) are not about the store, and run on SQLite alone.
@pytest.fixture
def store(engine_store: MemoryStore) -> MemoryStore:
    return engine_store


def _import(path: Path | str, workers: int) -> tuple[jsonl.ImportReport, str, MemoryStore]:
    store = MemoryStore(path, embedder=None)
    report = import_jsonl(store, LINES, batch_size=2, workers=workers)  # five batches
    out = io.StringIO()
    export_jsonl(store, out)
    # Each import writes at its own moment: when an entry was written is the one field meant to differ.
    written = re.sub(r',"updated_at":"[^"]*"', "", out.getvalue())
    return report, written, store


def test_a_worker_process_imports_exactly_what_one_process_imports(fresh_target: Callable[[], str]) -> None:
    serial_report, serial_export, serial = _import(fresh_target(), workers=0)
    parallel_report, parallel_export, parallel = _import(fresh_target(), workers=1)
    with serial, parallel:
        assert (serial_report.lines, serial_report.added, serial_report.skipped) == (9, 4, 1)
        assert [(e.line, e.reason.split(" (")[0]) for e in serial_report.errors] == [
            (4, "not valid JSON"),
            (6, "unknown kind 'diary' — use one of: note, turn, episode, fact, summary"),
            (8, "session is not valid Unicode"),
        ]
        assert parallel_report == serial_report
        assert parallel_export == serial_export  # same fields, redaction, hashes, metadata
        assert "ann@example.com" not in parallel_export and "4111 1111 1111 1111" not in parallel_export
        for words in (["argon2id"], ["january"], ["mail"], ["done", "mail"], ["card", "done"]):  # with the turn before
            assert keyword_holders(parallel, *words) == keyword_holders(serial, *words) != []


def test_rows_prepared_with_another_redaction_setting_are_refused(store: MemoryStore) -> None:
    unredacted = prepare_row({"text": "ann@example.com"}, namespace="default", redactor=None)
    with pytest.raises(InvalidInputError, match="prepared with redaction off, and this store has it on"):
        store.add_prepared([unredacted])
    with pytest.raises(InvalidInputError, match="takes new rows from prepare_row"):
        store.add_prepared([("not", "a", "row")])  # type: ignore[list-item]
    assert store.count() == 0


def test_a_large_input_gets_a_worker_and_a_small_one_does_not(
    sqlite_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite_store  # when a worker is started, not what is stored: on one engine
    used: list[int] = []
    real = jsonl._prepared_by_workers

    def spy(chunks, namespace, redactor, workers, sealer):  # type: ignore[no-untyped-def]
        used.append(workers)
        return real(chunks, namespace, redactor, workers, sealer)

    monkeypatch.setattr(jsonl, "_prepared_by_workers", spy)
    monkeypatch.setattr(jsonl, "PARALLEL_MIN_LINES", 50)
    monkeypatch.setattr(jsonl.os, "cpu_count", lambda: 2)
    small = import_jsonl(store, [f'{{"text": "small {i}"}}' for i in range(49)], batch_size=10)
    assert used == [] and small.added == 49
    large = import_jsonl(store, [f'{{"text": "large {i}"}}' for i in range(120)], batch_size=10)
    assert used == [1] and large.added == 120 and large.lines == 120
    assert store.count() == 169


def test_a_redactor_that_cannot_travel_redacts_in_this_process(store: MemoryStore) -> None:
    store.redactor = Redactor(detectors=[
        *default_detectors(),
        Detector("TICKET", (Rule(re.compile(r"TCK-[0-9]+")),), gate=lambda text: "TCK-" in text),
    ])
    report = import_jsonl(store, ['{"id": "a", "text": "see TCK-123 from bob@example.com"}'], workers=1)
    assert report.added == 1
    assert store.get("a").content == "see <TICKET> from <EMAIL>"


def test_a_killed_worker_is_one_clear_error_and_keeps_what_was_written(store: MemoryStore) -> None:
    store.redactor = Redactor(detectors=[
        *default_detectors(), Detector("NEVER", (Rule(re.compile("(?!)")),), gate=kill_on_marker),
    ])
    lines = [f'{{"id": "{i}", "text": "line {i}"}}' for i in range(40)]
    # The first batch is prepared here while the worker starts; the next two always go to the worker
    # (later ones may be prepared here too while it starts).
    lines[7] = '{"id": "7", "text": "KILL-THE-WORKER"}'
    with pytest.raises(StorageError, match="worker process stopped unexpectedly; what was written is kept"):
        import_jsonl(store, lines, batch_size=5, workers=1)
    kept = store.count()
    assert kept == 5  # the batch before the one that killed it
    assert store.integrity_check() == []
    lines[7] = '{"id": "7", "text": "line 7"}'
    again = import_jsonl(store, lines, batch_size=5, workers=0)  # idempotent: carries on where it stopped
    assert again.added == 40 - kept and store.count() == 40


def test_the_cli_import_takes_a_worker_count(db_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(LINES) + b"\n")
    result = cli_process("--db", str(db_path), "import", "--workers", "1", str(source), raise_errors=True)
    assert result.returncode == 1  # three lines were rejected
    assert result.stderr.decode().splitlines()[-1] == "Imported 4 entries from 9 lines (1 already stored, 3 rejected)"
    refused = cli_process("--db", str(db_path), "import", "--workers", "-1", str(source), raise_errors=True)
    assert refused.returncode == 2 and b"Traceback" not in refused.stderr


def _children(pid: int) -> set[int]:
    """The live (not zombie) processes whose parent is ``pid``, read from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
                if int(ppid) == pid and state != "Z":
                    found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_the_workers_of_a_killed_import_exit_with_it(db_path: Path) -> None:
    # The import reads stdin, which stays open: it is still running, its workers started, when killed.
    env = {**os.environ, "HARNESS_MEM_EMBEDDER": "none"}
    with subprocess.Popen([sys.executable, "-m", "harness_mem", "--db", str(db_path), "import", "-", "-q",
                           "--workers", "2"], stdin=subprocess.PIPE, env=env) as proc:
        try:
            assert proc.stdin is not None
            proc.stdin.write(b'{"text": "a line to prepare"}\n' * 40_000)  # enough chunks to start both workers
            proc.stdin.flush()
            deadline = time.monotonic() + 60
            children: set[int] = set()
            while len(children) < 3 and time.monotonic() < deadline:  # two workers and the resource tracker
                time.sleep(0.1)
                children |= _children(proc.pid)
            assert len(children) >= 3, f"the import did not start its workers: {children}"
        finally:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 60  # generous for a busy machine: the wait ends when they are gone
    while any(map(_alive, children)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid for pid in children if _alive(pid)}
    for pid in left:  # do not leave them behind when this test fails
        os.kill(pid, signal.SIGKILL)
    assert left == set()


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"text": "x", "timestamp": 1e20}', "cannot read a time from 1e+20"),
        ('{"text": "x", "timestamp": NaN}', "cannot read a time from nan"),
        ('{"text": "x", "timestamp": true}', "cannot read a time from True"),
        ('{"text": "x", "created_at": "9999-12-31T23:59:59-14:00"}', "is out of range — use a time within years 1–9999"),
        ('{"text": "x", "created_at": "0001-01-01T00:00:00+14:00"}', "is out of range — use a time within years 1–9999"),
        ('{"text": "x", "expires_at": 1e15}', "cannot read a time from 1000000000000000.0"),
        ('{"text": "x", "ttl_days": 1e300}', "ttl_days 1e+300 is too far ahead — at most 3,000,000 days"),
        ('{"text": "x", "ttl_days": NaN}', "ttl_days must be a positive number, not nan"),
        ('{"text": "x", "metadata": {"n": 1e400}}', "metadata is not JSON-serialisable"),
    ],
)
def test_times_and_numbers_out_of_range_are_bad_lines_not_a_failed_import(
    store: MemoryStore, line: str, reason: str
) -> None:
    report = import_jsonl(store, ['{"id": "before", "text": "kept"}', line, '{"id": "after", "text": "kept too"}'])
    assert [(e.line, reason in e.reason) for e in report.errors] == [(2, True)], report.errors
    assert report.added == 2
    assert [e.id for e in store.list()] == ["before", "after"]  # and what was stored reads back


def _nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def _field(key: str, value: str) -> str:
    return '{"text": "x", "' + key + '": ' + value + "}"


NESTED_LINES = pytest.mark.parametrize(
    ("line", "reason"),
    [
        (_field("metadata", '{"a": ' + _nested(950) + "}"), "metadata is nested more than 64 levels deep"),
        (_field("metadata", '{"a": ' + _nested(3000) + "}"), "the line is nested more than 64 levels deep"),
        (_field("metadata", '{"a": ' * 200 + "1" + "}" * 200), "metadata is nested more than 64"),
        (_field("extra", _nested(500)), "metadata is nested more than 64"),  # other keys are kept in metadata
        (_field("tags", _nested(950, '"t"')), "tags is nested more than 64 levels deep"),
        (_field("redactions", _nested(950)), "redactions is nested more than 64 levels deep"),
        (_nested(5000), "the line is nested more than 64 levels deep"),
    ],
)


def _one_bad_line(store: MemoryStore, line: str, reason: str, workers: int) -> None:
    lines = ['{"id": "before", "text": "kept"}', line, '{"id": "after", "text": "kept too"}']
    report = import_jsonl(store, lines, workers=workers)
    assert [(e.line, reason in e.reason) for e in report.errors] == [(2, True)], report.errors
    assert report.added == 2 and [e.id for e in store.list()] == ["before", "after"]


@NESTED_LINES
def test_a_deeply_nested_line_is_one_bad_line_and_its_batch_is_kept(store: MemoryStore, line: str, reason: str) -> None:
    _one_bad_line(store, line, reason, workers=0)


@NESTED_LINES
def test_a_deeply_nested_line_read_by_a_worker_process_is_one_bad_line_too(
    sqlite_store: MemoryStore, line: str, reason: str
) -> None:
    _one_bad_line(sqlite_store, line, reason, workers=1)  # the worker's parsing: on one engine


def test_metadata_at_the_nesting_limit_is_stored(store: MemoryStore) -> None:
    line = '{"id": "deep", "text": "x", "metadata": {"a": ' + _nested(62) + "}}"  # 64 levels with the object
    assert import_jsonl(store, [line]).errors == []
    assert store.get("deep").metadata["a"] == json.loads(_nested(62))


class _LongLineFile(io.RawIOBase):
    """A file of a good line, a ``size``-byte line and another good line, made as it is read."""

    def __init__(self, size: int) -> None:
        self.parts = [b'{"id": "before", "text": "kept"}\n', b'{"text": "', size, b'"}\n{"id": "after", "text": "kept too"}\n']

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self.parts and not self.parts[0]:
            self.parts.pop(0)
        if not self.parts:
            return 0
        part = self.parts[0]
        if isinstance(part, int):  # the long line's text: x after x
            n = min(len(buffer), part)
            buffer[:n] = b"x" * n
            self.parts[0] = part - n
        else:
            n = min(len(buffer), len(part))
            buffer[:n] = part[:n]
            self.parts[0] = part[n:]
        return n


def test_a_line_past_the_length_limit_is_refused_without_being_held_whole(store: MemoryStore) -> None:
    tracemalloc.start()
    try:
        report = import_jsonl(store, io.BufferedReader(_LongLineFile(200 << 20)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [str(e) for e in report.errors] == [
        "line 2: the line is longer than 8,388,608 bytes — split its text into several entries"
    ]
    assert report.added == 2 and report.lines == 3
    assert peak < 40 << 20  # the 200 MB line was never read whole


@pytest.mark.parametrize(
    "data",
    [b"", b"\n", b"a", b"a\n", b"a\nb", b"\n\na\n\n", b"abcdef\nab\n", b"abcdefghijklmnop\nabc", b"abcdefg",
     b"abcdef", b"abcdefgh\n" * 3, b"ab\r\ncd\r\n"],
)
@pytest.mark.parametrize("block", [1, 2, 3, 7, 100])
def test_read_lines_cuts_each_line_at_the_limit_wherever_the_blocks_end(
    monkeypatch: pytest.MonkeyPatch, data: bytes, block: int
) -> None:
    monkeypatch.setattr(jsonl, "_READ_BYTES", block)
    expected = data.split(b"\n")
    if expected[-1] == b"":
        expected.pop()
    read: list[int] = []
    assert list(jsonl.read_lines(io.BytesIO(data), limit=5, progress=read.append)) == [line[:6] for line in expected]
    assert list(jsonl.read_lines(io.StringIO(data.decode()), limit=5)) == [line[:6].decode() for line in expected]
    assert sum(read) == len(data)


def test_the_cli_reports_a_line_past_the_length_limit_and_imports_the_rest(engine_target: str, tmp_path: Path) -> None:
    db_path = engine_target
    source = tmp_path / "long.jsonl"
    with source.open("wb") as out:
        out.write(b'{"id": "before", "text": "kept"}\n{"text": "' + b"x" * (9 << 20) + b'"}\n')
        out.write(b'{"id": "after", "text": "kept too"}\n')
    result = CliRunner().invoke(cli, ["--db", str(db_path), "--embedder", "none", "import", "-q", str(source)],
                                catch_exceptions=False)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "Error: line 2: the line is longer than 8,388,608 bytes — split its text into several entries",
        "Imported 2 entries from 3 lines (0 already stored, 1 rejected)",
    ]


def test_a_line_naming_another_namespace_is_refused_and_that_namespace_untouched(
    engine_target: str, tmp_path: Path
) -> None:
    db_path = engine_target
    with MemoryStore(db_path, namespace="victim-tenant", embedder=None) as victim:
        victim.add("the victim's own memory", id="vmem")
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_text(
        '{"id": "ok", "text": "a line for the attacker\'s own namespace"}\n'
        '{"id": "vmem", "namespace": "victim-tenant", "text": "overwritten"}\n'
    )
    result = CliRunner().invoke(
        cli, ["--db", str(db_path), "-N", "attacker", "--embedder", "none", "import", "--replace", str(hostile)],
        catch_exceptions=False,
    )
    assert result.exit_code == 1
    assert "line 2: this entry names namespace 'victim-tenant', and this store writes into 'attacker'" in result.stderr
    assert "Imported 1 entry from 2 lines (0 already stored, 1 rejected)" in result.stdout + result.stderr
    with MemoryStore(db_path, namespace="victim-tenant", embedder=None) as victim:
        assert victim.get("vmem").content == "the victim's own memory"
    with MemoryStore(db_path, namespace="attacker", embedder=None) as attacker, pytest.raises(InvalidInputError):
        attacker.add_many([{"text": "sneaky", "namespace": "victim-tenant"}])


def test_an_import_copies_its_log_into_the_file_and_puts_the_checkpoint_threshold_back(tmp_path: Path) -> None:
    # An import lets the write-ahead log grow between its transactions (it is copied into the file
    # far less often), then copies it once at the end: the file holds everything, and the
    # connection checkpoints as usual afterwards, whether the import ended well or not.
    db = tmp_path / "m.db"
    store = MemoryStore(db, embedder=None)
    conn = store.storage.conn  # type: ignore[attr-defined]
    usual = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    lines = [json.dumps({"id": f"t{i}", "text": f"turn {i} about the deploy", "role": "user", "session": f"s{i // 40}"})
             for i in range(3000)]
    assert import_jsonl(store, lines, batch_size=500, workers=0).added == 3000
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == usual
    pages, page_size = (conn.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "page_size"))
    assert db.stat().st_size == pages * page_size  # not left in the log
    with pytest.raises(DuplicateIdError):
        import_jsonl(store, [*lines[:10], '{"id": "x", "text": "a"}', '{"id": "x", "text": "b"}'],
                     on_conflict="error", batch_size=5, workers=0)
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == usual
    assert store.count() == 3000


@pytest.mark.parametrize("workers", [0, 1])
def test_progress_follows_what_is_stored_not_what_is_read(store: MemoryStore, workers: int) -> None:
    text = "".join(json.dumps({"id": f"e{n}", "text": f"entry number {n} ✓"}, ensure_ascii=False) + "\n"
                   for n in range(250)).encode()
    seen: list[tuple[int, int, int]] = []  # (input bytes, entries added, entries in the store), per call

    def written(size: int, added: int) -> None:
        seen.append((size, added, store.stats()["entries"]))

    report = jsonl.import_jsonl(store, io.BytesIO(text), batch_size=100, workers=workers, written=written)
    assert report.added == 250
    assert [added for _, added, _ in seen] == [100, 200, 250]
    assert all(stored == added for _, added, stored in seen)  # said once it is stored, not when read
    assert sum(size for size, _, _ in seen) == len(text)  # a bar over the input's size ends at its end
