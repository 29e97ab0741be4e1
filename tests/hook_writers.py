"""The hook writers a test's hooks start: a private runtime directory per test, and every writer
started there stopped by its pid when the test ends (they are detached, so nothing else would)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def private_runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh runtime directory for the writers of the hooks the test runs (in ``os.environ``,
    which the tests' processes inherit); every writer started there is stopped at the end."""
    # Short and under the temporary directory: a socket's path must fit in about 100 bytes.
    directory = Path(tempfile.mkdtemp(prefix="hm-"))
    monkeypatch.setenv("HARNESS_MEM_RUNTIME_DIR", str(directory))
    monkeypatch.setenv("HARNESS_MEM_WRITER_IDLE_SECONDS", "60")  # a safety net behind stop_writers
    try:
        yield directory
    finally:
        stop_writers(directory)
        shutil.rmtree(directory, ignore_errors=True)


def writers(directory: Path) -> list[int]:
    """The pids of the hook writers running with ``directory`` as their runtime directory (started
    or still starting), read from /proc: the writers are detached, so no parent knows them."""
    wanted = f"HARNESS_MEM_RUNTIME_DIR={directory}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours
            continue
        if b"harness_mem.hook_writer" in command and wanted in environ:
            found.append(int(entry.name))
    return found


def is_running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_writers(directory: Path) -> None:
    """Stop every writer of ``directory``: SIGTERM (it removes its socket), SIGKILL after 5 s."""
    pids = writers(directory)
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while any(is_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if is_running(pid):
            os.kill(pid, signal.SIGKILL)


def serving(directory: Path, timeout: float = 90.0) -> dict[str, int]:
    """The writers of ``directory`` that listen (socket name → pid), once at least one does (a writer
    imports the store in a fresh process: at a load of 10 on two cores that can take half a minute)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = listening(directory)
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no hook writer came up in {directory}")


def listening(directory: Path) -> dict[str, int]:
    """Socket name → pid of the writers of ``directory`` that have bound their socket."""
    found = {}
    for lock in directory.glob("*.lock"):
        sock = lock.with_suffix(".sock")
        text = lock.read_text().strip()
        if sock.exists() and text.isdigit() and is_running(int(text)):
            found[sock.name] = int(text)
    return found


def wait_until(condition: object, timeout: float = 120.0) -> bool:
    """Poll ``condition()`` until it is true or ``timeout`` seconds have passed; its last value. The
    default is a failure detector: long enough for processes started at a load of 10."""
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not (result := bool(condition())) and time.monotonic() < deadline:
        time.sleep(0.05)
    return result
