"""TranscriptWriter: a session's turns written by a thread of its own, so a kill -9 loses only the last interval."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness_mem import (
    AsyncMemoryStore,
    InvalidInputError,
    MemoryStore,
    Redactor,
    TranscriptRecorder,
    TranscriptWriter,
)
from harness_mem.experience.transcript_writer import THREAD_PREFIX
from harness_mem.redaction import Redaction


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    with MemoryStore(tmp_path / "memory.db", embedder=None) as opened:
        yield opened


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


# ---- a real process, killed -----------------------------------------------------------------------

# The child notes TURNS turns, waits longer than its interval, says "ready" and goes on noting turns
# until it is killed: the kill lands while the writer is busy, as it would in a real host.
KILLED_CHILD = """
import sys, time
from harness_mem import MemoryStore, TranscriptWriter

db, turns, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
store = MemoryStore(db, embedder=None)
writer = TranscriptWriter(store, session="killed", interval=interval)
for i in range(turns):
    if i % 3 == 0:
        writer.note_user(f"question {i} about the billing ledger")
    elif i % 3 == 1:
        writer.note_assistant(f"answer {i}: the ledger row {i * 7} is reconciled")
    else:
        writer.note_tool("lookup", {"row": i, "status": "reconciled"})
time.sleep(interval * 4)
print("ready", flush=True)
i = turns
while True:
    writer.note_user(f"after ready {i} " + "x" * 500)
    i += 1
    if i % 5 == 0:
        time.sleep(0.001)
"""


def test_every_turn_noted_an_interval_before_a_sigkill_is_in_an_intact_file(tmp_path: Path) -> None:
    db, noted = tmp_path / "agent.db", 300
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD, str(db), str(noted), "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as child:
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line == "ready\n", child.stderr.read() if child.stderr else ""
            time.sleep(0.3)  # several batches of later turns are being written when the kill lands
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == -signal.SIGKILL

    with MemoryStore(db, embedder=None) as store:  # the file as the kill left it
        assert store.db.conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert store.integrity_check() == []
        got = [t.content for t in store.list(kind="turn", session="killed")]  # creation order
    before = got[:noted]
    assert len(before) == noted
    for i, content in enumerate(before):
        if i % 3 == 0:
            assert content == f"question {i} about the billing ledger"
        elif i % 3 == 1:
            assert content == f"answer {i}: the ledger row {i * 7} is reconciled"
        else:
            assert content == f'[lookup] {{"row":{i},"status":"reconciled"}}'
    # What was noted after "ready" is there in order, up to the last committed batch.
    after = got[noted:]
    assert after, "the writer wrote nothing after ready: the kill did not land mid-capture"
    assert [int(c.split()[2]) for c in after] == list(range(noted, noted + len(after)))


# ---- in process -----------------------------------------------------------------------------------


def test_the_writer_batches_in_the_background_and_stops_cleanly(store: MemoryStore) -> None:
    writer = TranscriptWriter(store, session="s-1", interval=0.05, batch=1000)
    for i in range(50):
        writer.note_user(f"message {i}")
    wait_for(lambda: store.count(kind="turn", session="s-1") >= 50)
    assert store.count(kind="turn", session="s-1") == 50 and writer.running
    writer.note_tool("shell", {"exit": 0})
    stats = writer.stop()
    assert stats.written == 51 and stats.pending == 0 and not writer.running
    writer.note_user("too late")
    assert writer.stop().late == 1 and store.count(kind="turn", session="s-1") == 51


def test_the_writer_writes_into_the_very_store_it_was_given_on_every_engine(engine_target: str) -> None:
    # Its own connection is opened with what opened the store: on PostgreSQL the whole URL (its
    # password, its search_path), not the printable location, which names neither.
    with MemoryStore(engine_target, embedder=None) as store:
        with TranscriptWriter(store, session="s-engine", interval=0.05) as writer:
            writer.note_user("a turn from the background writer")
        assert writer.stats.written == 1
        assert [t.content for t in store.list(session="s-engine")] == ["a turn from the background writer"]
        other = store.another()
        try:
            assert other.count() == store.count() == 1 and other.namespace == store.namespace
        finally:
            other.close()


def test_a_full_batch_wakes_the_writer_before_its_interval(store: MemoryStore) -> None:
    with TranscriptWriter(store, session="s-2", interval=60, batch=10) as writer:
        for i in range(10):
            writer.note_user(f"message {i}")
        wait_for(lambda: store.count(kind="turn", session="s-2") >= 10)
        assert store.count(kind="turn", session="s-2") == 10


def test_leaving_the_with_block_writes_what_is_queued_and_stops(store: MemoryStore) -> None:
    with TranscriptWriter(store, session="s-3", interval=60) as writer:
        writer.note_user("deploy the site")
        writer.note_assistant("Deployed.", success=True)
        assert writer.running and store.count(kind="turn", session="s-3") == 0
    assert not writer.running and writer_threads() == []
    assert [t.content for t in store.session_turns("s-3")] == ["deploy the site", "Deployed."]
    assert writer.stats.written == 2 and writer.last_error is None


def test_an_in_memory_store_is_written_on_stop_by_the_caller() -> None:
    with MemoryStore(":memory:", embedder=None) as store:
        writer = TranscriptWriter(store, session="s-4")
        assert not writer.threaded and not writer.running and writer.others_version is None
        writer.note("system", "[run ended: stuck]", success=False)
        assert writer.pending == 1 and store.count(kind="turn") == 0
        assert writer.stop().written == 1
        (turn,) = store.session_turns("s-4")
        assert turn.role == "system" and "result:failure" in turn.tags


def test_others_version_moves_for_other_writers_and_not_for_its_own_turns(store: MemoryStore) -> None:
    with TranscriptWriter(store, session="s-5", interval=0.02) as writer:
        start = writer.others_version
        writer.note_user("a turn of its own")
        wait_for(lambda: store.count(kind="turn", session="s-5") == 1)
        time.sleep(0.1)  # a few wake-ups after its own write
        assert writer.others_version == start
        store.add("a note from the host", kind="note")  # the host's connection: another writer
        wait_for(lambda: writer.others_version != start)
        assert writer.others_version != start


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"interval": 0}, "interval must be a positive number"),
    ({"interval": True}, "interval must be a positive number"),
    ({"batch": 0}, "batch must be a whole number"),
    ({"session": " "}, "needs a session id"),
])
def test_bad_settings_are_refused_in_one_line(store: MemoryStore, kwargs: dict[str, object], message: str) -> None:
    settings: dict[str, object] = {"session": "s-6", **kwargs}
    with pytest.raises(InvalidInputError, match=message):
        TranscriptWriter(store, **settings)  # type: ignore[arg-type]
    assert writer_threads() == []


# ---- a turn is redacted once ----------------------------------------------------------------------


class CountingRedactor(Redactor):
    """The real redactor, counting the texts it scrubs."""

    def __init__(self) -> None:
        super().__init__(secret=b"k" * 32)
        self.scrubbed: list[str] = []

    def scrub(self, text: str) -> Redaction:
        self.scrubbed.append(text)
        return super().scrub(text)


def test_each_turn_is_scrubbed_once_on_its_way_to_the_file(tmp_path: Path) -> None:
    redactor = CountingRedactor()
    with MemoryStore(tmp_path / "memory.db", embedder=None, redactor=redactor) as store:
        assert store.redactor is redactor
        with TranscriptWriter(store, session="s-7", interval=0.02) as writer:
            for i in range(20):
                writer.note_user(f"turn {i}: mail ada.lovelace{i}@example.com")
        stored = store.session_turns("s-7", limit=100)
    assert [t.content for t in stored] == [f"turn {i}: mail <EMAIL>" for i in range(20)]
    assert all(t.redactions == {"EMAIL": 1} for t in stored)
    for i in range(20):
        assert sum(text.startswith(f"turn {i}:") for text in redactor.scrubbed) == 1, i


def test_a_store_still_scrubs_what_another_redactor_scrubbed(tmp_path: Path) -> None:
    redactor = CountingRedactor()
    with MemoryStore(tmp_path / "memory.db", embedder=None, redactor=redactor) as store:
        (entry,) = store.add_many([{"text": "mail ada@example.com", "role": "user"}], scrubbed_by=Redactor())
    assert entry.content == "mail <EMAIL>"
    assert redactor.scrubbed == ["mail ada@example.com"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_recorder_on_an_async_store_scrubs_each_turn_once(tmp_path: Path) -> None:
    redactor = CountingRedactor()
    memory = AsyncMemoryStore(tmp_path / "memory.db", embedder=None, redactor=redactor)
    async with TranscriptRecorder(memory, session="s-8") as rec:
        rec.note_user("call me on ada@example.com")
        rec.note_tool("crm", "ada@example.com is the customer")
    (user, tool_turn) = memory.store.session_turns("s-8")
    await memory.aclose()
    assert (user.content, tool_turn.content) == ("call me on <EMAIL>", "[crm] <EMAIL> is the customer")
    assert sum("ada@example.com" in text for text in redactor.scrubbed) == 2  # one scrub per turn
