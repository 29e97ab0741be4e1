"""Old import paths kept working for one release, with a DeprecationWarning on use."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def forward(old: str, new: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old`` that serves every name from ``new`` and warns."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        warnings.warn(f"{old} moved to {new}; import {name} from there", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return __getattr__
