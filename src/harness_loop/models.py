"""Deprecated: moved to :mod:`harness_loop.chat` (this alias goes in the next release)."""

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    warnings.warn(f"harness_loop.models moved to harness_loop.chat; import {name} from there",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module("harness_loop.chat"), name)
