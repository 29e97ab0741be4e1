"""What the soak tests share (tests/mem/test_soak.py on a SQLite file, test_soak_postgres.py on a
PostgreSQL schema): the replay of the writers' logs into what the store must hold, and the handling
of the worker processes (tests/soak_worker.py) they start.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

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


#: One maintenance run: the command's words, the CLI process (None when run in this process), seconds.
Run = tuple[tuple[str, ...], "subprocess.CompletedProcess[bytes] | None", float]


def drive(procs: dict[str, subprocess.Popen[bytes]], workdir: Path, target: str, own: Any, *, started: float,
          seconds: float, min_load_s: float, startup_limit_s: float,
          maintenance: tuple[tuple[str, ...], ...]) -> tuple[list[Run], float]:
    """Start the workers' load once they are ready, run ``maintenance`` (``("cli", …)`` as a
    ``harness-mem --db target`` process, ``("library", "gc"|"reindex")`` through ``own``) again and
    again until the stop time and at least once each, tell the workers to stop, wait for them;
    returns the runs and the load's seconds. The workers and ``own`` are stopped whatever happens."""
    from fake_embedder import cli_process

    runs: list[Run] = []
    try:
        wait_until_ready(procs, workdir, startup_limit_s)
        stop = time.time() + max(seconds - (time.monotonic() - started), min_load_s)
        load_began = time.time()
        (workdir / "go.tmp").write_text(repr(stop))
        os.replace(workdir / "go.tmp", workdir / "go")  # every worker sees the whole stop time or none
        for how, *args in itertools.cycle(maintenance):
            # A command takes a few seconds: none starts at the end, once each has run. On a loaded
            # machine the load lasts longer rather than some maintenance never running beside it.
            if time.time() >= stop - 1 and len(runs) >= len(maintenance):
                break
            result, began = None, time.monotonic()
            if how == "cli":
                result = cli_process("--db", target, *args, raise_errors=True, timeout=300)
            elif args == ["gc"]:
                own.gc()
            else:
                own.reindex()
            runs.append((tuple(args), result, time.monotonic() - began))
            time.sleep(0.5)
        (workdir / "stop").touch()
        load_seconds = max(stop, time.time()) - load_began
        for name, proc in procs.items():
            try:
                proc.wait(timeout=max(stop - time.time(), 0) + 120)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{name} was still running two minutes after the stop time:\n{worker_output(workdir, name)}")
    finally:
        own.close()
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return runs, load_seconds


def check_outputs(procs: dict[str, subprocess.Popen[bytes]], workdir: Path, runs: list[Run],
                  bad_output: tuple[str, ...]) -> None:
    """Every worker and every maintenance process exited 0 and said none of ``bad_output``."""
    timeline = [(" ".join(args), round(took, 2)) for args, _, took in runs]
    print(f"\nsoak maintenance (command, seconds): {timeline}")  # shown with a failure below
    for name, proc in procs.items():
        output = worker_output(workdir, name)
        assert proc.returncode == 0, f"{name} exited with {proc.returncode}:\n{output}"
        assert not [bad for bad in bad_output if bad in output], f"{name} said:\n{output}"
    for args, result, _ in runs:
        if result is None:  # run in this process: an error would have ended the test
            continue
        output = (result.stdout + result.stderr).decode(errors="replace")
        assert result.returncode == 0, f"harness-mem {' '.join(args)} exited with {result.returncode}:\n{output}"
        assert not [bad for bad in bad_output if bad in output], f"harness-mem {' '.join(args)} said:\n{output}"
