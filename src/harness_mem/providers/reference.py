"""The reference runtime: the sentence-transformers model, loaded once per process.

Imported only when a model is really needed (``import sentence_transformers`` costs seconds).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..errors import EmbedderError

INSTALL_HINT = "pip install 'harness-mem[embed]' (after the CPU torch: pip install torch)"

_models: dict[tuple[str, str], Any] = {}
_models_lock = threading.Lock()


def load_reference_model(path: str, device: str) -> Any:
    """One loaded model per (path, device) per process: stores opened one after another share it."""
    with _models_lock:
        if (path, device) not in _models:
            # Never reach for a hub, and keep stderr for our own messages.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise EmbedderError(f"sentence-transformers is not installed — {INSTALL_HINT}") from None
            try:
                _models[(path, device)] = SentenceTransformer(path, device=device, local_files_only=True)
            except OSError as exc:
                raise EmbedderError(f"cannot load the embedding model from {path} ({exc}) — reinstall it") from None
        return _models[(path, device)]
