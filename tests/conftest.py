"""Hermetic tests: no real home directory, no hub, no network; bugs raise instead of being printed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_MEM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HARNESS_MEM_DB", raising=False)
    monkeypatch.delenv("HARNESS_MEM_NAMESPACE", raising=False)
    monkeypatch.setenv("HARNESS_MEM_RAISE_ERRORS", "1")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[object]:
    from harness_mem.store import MemoryStore

    with MemoryStore(db_path) as opened:
        yield opened
