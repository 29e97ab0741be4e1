"""What the soak tests share (tests/mem/test_soak.py on a SQLite file, test_soak_postgres.py on a
PostgreSQL schema): the replay of the writers' logs into what the store must hold, and the handling
of the worker processes (tests/soak_worker.py) they start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

WORKER = Path(__file__).resolve().parent / "soak_worker.py"


@dataclass
class Expected:
    """What the writers' logs say the file must hold (their own ids only ever change by their hand)."""

    live: dict[str, int] = field(default_factory=dict)  # id → writer
    expiring: dict[str, int] = field(default_factory=dict)  # expired by the end: stored until purged
    forgotten: set[str] = field(default_factory=set)
    superseded: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)

    def replay(self, writer: int, log: str) -> None:
        for line in log.splitlines():
            verb, entry_id = line.split()
            self.counts[verb] += 1
            if verb == "add":
                self.live[entry_id] = writer
            elif verb == "exp":
                self.expiring[entry_id] = writer
            elif verb == "sup":
                assert entry_id in self.live, line
                self.superseded.add(entry_id)
            else:
                assert self.live.pop(entry_id, None) == writer, f"writer {writer}: {line} of an id it does not hold"
                self.superseded.discard(entry_id)
                if verb == "forget":
                    self.forgotten.add(entry_id)


def start_worker(role: str, number: int, target: str, workdir: Path, *extra: str) -> subprocess.Popen[bytes]:
    """One soak_worker.py process on ``target`` (a file or a DSN), its output in ``workdir``."""
    name = f"{role}-{number}"
    with open(workdir / f"{name}.out", "wb") as out, open(workdir / f"{name}.err", "wb") as err:
        # A crash in C (SQLite, an extension) prints where it was, not a bare exit status.
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        return subprocess.Popen([sys.executable, str(WORKER), role, str(number), target, str(workdir), *extra],
                                stdout=out, stderr=err, env=env)


def worker_output(workdir: Path, name: str) -> str:
    return "".join((workdir / f"{name}.{suffix}").read_text(errors="replace") for suffix in ("out", "err"))


def wait_until_ready(procs: dict[str, subprocess.Popen[bytes]], workdir: Path, limit_s: float) -> None:
    """Until every worker said it is ready; a worker that exits first, or a start past ``limit_s``, fails."""
    waited = time.monotonic() + limit_s
    while not all((workdir / f"ready-{name}").exists() for name in procs):
        for name, proc in procs.items():
            assert proc.poll() is None, f"{name} exited before the start (rc {proc.returncode}):\n{worker_output(workdir, name)}"
        assert time.monotonic() < waited, "the workers did not all start in time"
        time.sleep(0.05)
