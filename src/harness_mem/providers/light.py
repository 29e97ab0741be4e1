"""The light runtime: the same MiniLM network on onnxruntime and ``tokenizers``, without torch.

``import sentence_transformers`` costs about four seconds and 400 MB before the first vector; a
command that embeds one query cannot afford it. The light runtime runs an ONNX export of the
installed weights instead: importing onnxruntime and opening the session take a few tenths of a
second. The export is made once per model (with torch, which the reference backend brings anyway),
checked against the reference on probe texts, and cached under the user cache directory, keyed by
the model's fingerprint: a different model, or changed weights, never reuses it.

The vectors are the reference's to within float rounding (cosine ≥ 0.9999, tested), so a store's
recorded fingerprint stays valid whichever runtime wrote them. An int8 variant is another model,
made from the export by one of the recipes of :mod:`.int8`, with a fingerprint of its own.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import EmbedderError
from ..settings import Settings
from .int8 import Recipe, quantize
from .rewrites import drop_nan_guards

#: Bump when the export's graph changes: old exports are then made again, not reused.
#: (2: the graph also gives each word piece's unit vector, for late-interaction reranking;
#: 3: without the attention's NaN guards, :func:`.rewrites.drop_nan_guards`: the same vectors, faster.)
EXPORT_VERSION = 3
#: Texts the export is checked on against the reference before it is trusted.
PROBE_TEXTS = (
    "We chose argon2id for password hashing.",
    "東京の天気は晴れです。我们讨论了数据库迁移。",
    "ok",
    "the deploy failed again " * 40,
)
MIN_PROBE_COSINE = 0.9999
#: Word pieces (padding included) one forward pass takes at most: one text as long as the model
#: reads, or about a dozen chat turns. Larger passes leave the CPU's caches (a layer's attention
#: scores are heads x pieces x pieces floats): on two cores the raw session ran ~200-word replies
#: fastest one a pass and ~15-word turns 8-16 a pass (bench_embedding_speed.py's grid; its
#: ``--budgets`` compares caps, 256 against 512 within the noise of a loaded machine).
PASS_TOKENS = 256


def cache_dir() -> Path:
    """``$HARNESS_MEM_CACHE_DIR``, else ``harness-mem`` in ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""
    return Settings.from_env().cache_path()


def export_path(fingerprint: str, recipe: Recipe | None = None) -> Path:
    """Where the float export of the weights ``fingerprint`` names is cached, or its int8 model by ``recipe``."""
    digest = fingerprint.removeprefix("sha256:")
    name = f"model-{recipe.tag}.onnx" if recipe is not None else "model.onnx"
    return cache_dir() / "onnx" / f"{digest}-v{EXPORT_VERSION}" / name


def runtime_available() -> bool:
    """True when onnxruntime and tokenizers import (checked without importing them)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "tokenizers"))


def int8_export_ready(recipe: Recipe) -> bool:
    """True when an int8 model of ``recipe`` is cached, or one could be made here: the exporter's
    packages are installed and the cache folder can be written (checked without importing them or
    writing anything)."""
    import importlib.util

    folder = cache_dir()
    if any((folder / "onnx").glob(f"*-v{EXPORT_VERSION}/model-{recipe.tag}.onnx")):
        return True
    if not all(importlib.util.find_spec(name) is not None for name in ("onnx", "torch", "transformers")):
        return False
    while not folder.exists():  # the nearest folder that is there must take the new ones
        if folder.parent == folder:
            return False
        folder = folder.parent
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


def ensure_export(model_dir: Path, fingerprint: str, recipe: Recipe | None = None, *,
                  starting: Callable[[], None] | None = None) -> Path:
    """The cached ONNX file for this model (int8 by ``recipe``, else float), made (once, then reused)
    when it is missing; ``starting()`` is called when making it begins (the cache folder is writable by then)."""
    target = export_path(fingerprint, recipe)
    if target.is_file():
        return target
    if recipe is not None:
        source = ensure_export(model_dir, fingerprint, starting=starting)
        tokenizer = _tokenizer(model_dir)
        _write_atomically(target, lambda tmp: quantize(recipe, source, tmp, lambda text: tokenizer.encode(text).ids),
                          starting)
    else:
        _write_atomically(target, lambda tmp: _export(model_dir, tmp), starting)
    return target


def _write_atomically(target: Path, make: Any, starting: Callable[[], None] | None = None) -> None:
    """Make the file beside its final name, then rename: a reader never sees half an export, and
    two processes exporting at once both end with a whole file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".export-", suffix=".onnx")
    os.close(handle)
    tmp = Path(tmp_name)
    if starting is not None:
        starting()
    try:
        make(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _export(model_dir: Path, target: Path) -> None:
    """Trace the transformer with mean pooling and normalisation into one ONNX graph, then check it.

    The graph has two outputs: ``embedding`` (the pooled unit vector) and ``tokens`` (each word
    piece's unit vector, for :mod:`harness_mem.rerank`); a caller asks onnxruntime for the one it needs.
    """
    try:
        import onnx
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise EmbedderError(f"cannot make the ONNX export: {exc.name} is not installed") from None

    class Pooled(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            tokens = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(tokens.dtype)
            pooled = (tokens * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return (torch.nn.functional.normalize(pooled, p=2, dim=1),
                    torch.nn.functional.normalize(tokens, p=2, dim=2))

    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()
    # A padded sample, so the traced graph takes the masked path that batches of mixed lengths use.
    ids = torch.full((2, 8), 1000, dtype=torch.long)
    mask = torch.ones((2, 8), dtype=torch.long)
    mask[1, 5:] = 0
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shapes it treats as constants
        torch.onnx.export(
            Pooled(model), (ids, mask), str(target),
            input_names=["input_ids", "attention_mask"], output_names=["embedding", "tokens"],
            dynamic_axes={"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
                          "embedding": {0: "batch"}, "tokens": {0: "batch", 1: "tokens"}},
            opset_version=17, dynamo=False,
        )
    graph = onnx.load(str(target))
    drop_nan_guards(graph)
    onnx.save(graph, str(target))
    _check_against_reference(model_dir, target)


def _check_against_reference(model_dir: Path, onnx_file: Path) -> None:
    from .reference import load_reference_model

    reference = load_reference_model(str(model_dir), "cpu").encode(list(PROBE_TEXTS), normalize_embeddings=True)
    light = OnnxEncoder(onnx_file, model_dir).encode(PROBE_TEXTS)
    worst = float(np.min(np.sum(reference * light, axis=1)))
    if worst < MIN_PROBE_COSINE:
        raise EmbedderError(f"the ONNX export disagrees with the reference model (cosine {worst:.6f})")


def _max_tokens(model_dir: Path) -> int:
    """The reference's truncation length (sentence-transformers keeps it beside the weights)."""
    config = model_dir / "sentence_bert_config.json"
    try:
        return int(json.loads(config.read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return 256


def _tokenizer(model_dir: Path) -> Any:
    """The model's tokenizer as the runtime feeds it: truncated to what the model reads, unpadded."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise EmbedderError(f"the light runtime needs {exc.name}") from None
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(_max_tokens(model_dir))
    tokenizer.no_padding()
    return tokenizer


_sessions: dict[tuple[str, int | None], Any] = {}
_sessions_lock = threading.Lock()


class OnnxEncoder:
    """An ONNX sentence encoder: tokenise, run the graph, return unit-length float32 rows.

    Texts are sorted by length before batching, as sentence-transformers does, so a batch pads
    only to its own longest text. ``threads`` caps the CPU threads one forward pass uses (None:
    onnxruntime's default, one per core); encoders of the same file and cap share one session.
    """

    def __init__(self, onnx_file: Path, model_dir: Path, *, threads: int | None = None) -> None:
        try:
            import onnxruntime  # type: ignore[import-untyped]
        except ImportError as exc:
            raise EmbedderError(f"the light runtime needs {exc.name}") from None
        with _sessions_lock:
            key = (str(onnx_file), threads)
            if key not in _sessions:
                options = onnxruntime.SessionOptions()
                options.log_severity_level = 3  # warnings about unused initialisers are noise here
                if threads is not None:
                    options.intra_op_num_threads = threads
                    options.inter_op_num_threads = 1
                # A pass's threads sleep when they run out of work instead of spinning for more: on
                # two cores that other processes share, spinning threads take the core the thread
                # with work is waiting for (at load 11, two spinning threads embed 2.5 times slower).
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                _sessions[key] = onnxruntime.InferenceSession(str(onnx_file), options,
                                                              providers=["CPUExecutionProvider"])
            self.session = _sessions[key]
        self.tokenizer = _tokenizer(model_dir)

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> npt.NDArray[np.float32]:
        out = np.empty((len(texts), 0), dtype=np.float32)
        for chosen, ids, mask in self.batches(texts, batch_size):
            vectors = self.session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
            if out.shape[1] == 0:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[chosen] = vectors
        return out

    def token_vectors(self, texts: Sequence[str], batch_size: int = 64) -> list[npt.NDArray[np.float32]]:
        """Each text's word pieces as unit vectors (one row each), its two markers left out."""
        out: list[npt.NDArray[np.float32]] = [np.zeros((0, 0), dtype=np.float32)] * len(texts)
        for chosen, ids, mask in self.batches(texts, batch_size):
            states = self.session.run(["tokens"], {"input_ids": ids, "attention_mask": mask})[0]
            for row, i in enumerate(chosen):
                n = int(mask[row].sum())
                out[i] = np.ascontiguousarray(states[row, 1:n - 1], dtype=np.float32)  # [CLS] … [SEP]
        return out

    def batches(self, texts: Sequence[str], batch_size: int) -> Iterator[tuple[npt.NDArray[np.intp], npt.NDArray[np.int64],
                                                                           npt.NDArray[np.int64]]]:
        """(positions in ``texts``, input ids, attention mask) per batch, the texts sorted by length.

        A batch also ends before it pads past PASS_TOKENS word pieces: a pass that size is faster per
        piece than a larger one, and a call of mixed lengths no longer pads them all to
        its longest (a consolidation's embedder calls, a few dozen segments each: 15.6 s as one pass
        a call, 3.2 s so)."""
        encodings = self.tokenizer.encode_batch(list(texts))
        order = np.argsort([-len(e.ids) for e in encodings], kind="stable")
        start = 0
        while start < len(order):
            width = len(encodings[order[start]].ids)  # the longest of its batch: sorted longest first
            size = max(1, min(batch_size, PASS_TOKENS // max(width, 1)))
            chosen = order[start:start + size]
            start += size
            ids = np.zeros((len(chosen), width), dtype=np.int64)
            mask = np.zeros((len(chosen), width), dtype=np.int64)
            for row, i in enumerate(chosen):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            yield chosen, ids, mask
