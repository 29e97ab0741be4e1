"""A full disk is one line that says so, with nothing lost that was committed (a real small file system)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_embedder import cli_process

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs (needs the right to mount; the test is skipped without it)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a small file system here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("workers", ["0", "1"])
def test_an_import_that_fills_the_disk_stops_with_one_line(small_disk: Path, tmp_path: Path, workers: str) -> None:
    source = tmp_path / "big.jsonl"
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    source.write_text("".join(
        json.dumps({"text": f"note {i} " + " ".join(words[(i * j) % 6] for j in range(30))}) + "\n"
        for i in range(30_000)
    ))
    db = small_disk / "memory.db"
    assert cli_process("--db", str(db), "--embedder", "none", "add", "written before the disk filled").returncode == 0
    result = cli_process("--db", str(db), "--embedder", "none", "import", str(source), "-q", "--workers", workers)
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"Error: no space left to write {db} — this transaction was rolled back and what was committed before it"
        " is kept; free some space"
    ]
    listed = cli_process("--db", str(db), "list", "--json")
    assert listed.returncode == 0
    assert json.loads(listed.stdout.splitlines()[0])["content"] == "written before the disk filled"
