"""``harness-mem ui`` as a real process on 127.0.0.1, and headless Chromium to drive it.

Used by the browser tests and by ``scripts/screenshots.py``. Chromium is the system's (Debian's
``chromium`` package), never a downloaded build: Playwright is pointed at its executable.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: How long a server may take to print its address, at any load.
START_TIMEOUT_S = 120


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextmanager
def ui_process(db: Path, *options: str, launcher: Sequence[str] | None = None,
               env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``harness-mem --db DB ui --no-open --port 0 OPTIONS…`` running; yields the URL it printed
    (with its access token) and the process. ``launcher`` replaces ``python -m harness_mem``."""
    command = [*(launcher or [sys.executable, "-m", "harness_mem"]), "--db", str(db), "ui", "--no-open", "--port", "0",
               *options]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or dict(os.environ))
    try:
        yield _printed_url(proc), proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _printed_url(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + START_TIMEOUT_S
    line = b""
    while time.monotonic() < deadline:
        if selector.select(timeout=1):
            line = proc.stdout.readline()
            found = re.search(rb"http://\S+", line)
            if found:
                return found.group().decode()
        if proc.poll() is not None:
            break
    stderr = proc.stderr.read().decode()[-2000:] if proc.stderr and proc.poll() is not None else ""
    raise AssertionError(f"harness-mem ui printed no address: {line!r} {stderr}")


@contextmanager
def browser() -> Iterator[Any]:
    """Headless Chromium (the system's), through Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()
