"""Shared fixtures for harness_loop tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (the anyio pytest plugin reads this)."""
    return "asyncio"
