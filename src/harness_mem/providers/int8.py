"""The int8 recipes: how the float ONNX export becomes an int8 model, and whether a text's vector
depends on the texts embedded beside it.

Both recipes quantise the weights of every linear layer to int8, one scale per output channel (one
scale for a whole matrix moves a short text's vector to cosine 0.87 of the float model's). They
differ in how a layer's input is quantised:

- **dynamic** (recipe 2, ``minilm-int8``): by the range of the whole forward pass, measured as it
  runs. A text's vector then depends on what else is in the pass, padding included, so this model
  embeds one text a pass.
- **static** (recipe 4, ``minilm-int8s``, a new file's default): by a fixed range per layer,
  calibrated once on the texts of ``calibration_texts.jsonl`` (chat turns, replies, code and logs,
  other scripts; each embedded alone, so padding never widens a range). Nothing depends on a text's batch mates (padding is
  masked), so this model embeds in length-sorted batches, where onnxruntime is fastest. Only the
  products with a weight matrix are quantised, and their outputs stay float: quantising the
  attention products between two activations, or re-quantising outputs, took the median cosine
  to the float model from 0.989 to 0.93. Each product then runs as one integer kernel with its bias
  (:func:`.rewrites.fuse_int8_bias`).

The calibration is deterministic (fixed texts, min/max ranges), so an export made twice is the same
model; the recipe's version is part of the model's fingerprint and of its file's name.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import EmbedderError
from .rewrites import fuse_int8_bias

Quantization = Literal["dynamic", "static"]
CALIBRATION_TEXTS = Path(__file__).with_name("calibration_texts.jsonl")


@dataclass(frozen=True)
class Recipe:
    """One way of making the int8 model; a new version is a new model (fingerprint and file)."""

    kind: Quantization
    version: int
    #: True when a text's vector is the same whatever it is embedded beside (to float rounding).
    batch_invariant: bool

    @property
    def tag(self) -> str:
        """What the model's fingerprint and file name carry: ``int8-q<version>``."""
        return f"int8-q{self.version}"


RECIPES: dict[Quantization, Recipe] = {
    "dynamic": Recipe("dynamic", 2, batch_invariant=False),
    "static": Recipe("static", 4, batch_invariant=True),
}


def calibration_texts() -> list[str]:
    """The texts the static recipe measures its activation ranges on (one JSON string a line)."""
    return [json.loads(line) for line in CALIBRATION_TEXTS.read_text(encoding="utf-8").splitlines() if line]


def quantize(recipe: Recipe, source: Path, target: Path, tokenize: Callable[[str], list[int]]) -> None:
    """Write ``recipe``'s int8 model of the float export ``source`` to ``target``; ``tokenize`` gives
    a text's word-piece ids as the runtime would feed them (the static recipe's calibration)."""
    try:
        import onnx  # noqa: F401  (the quantiser needs it; fail here with a clear reason)
        from onnxruntime import quantization  # type: ignore[import-untyped]
    except ImportError as exc:
        raise EmbedderError(f"cannot quantise the model: {exc.name} is not installed") from None
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantiser logs advice about pre-processing on the root logger
    try:
        if recipe.kind == "dynamic":
            quantization.quantize_dynamic(str(source), str(target), weight_type=quantization.QuantType.QInt8,
                                          per_channel=True)
        else:
            _quantize_static(quantization, source, target, tokenize)
    finally:
        root.setLevel(level)


def _quantize_static(quantization: Any, source: Path, target: Path, tokenize: Callable[[str], list[int]]) -> None:
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process  # type: ignore[import-untyped]

    class Calibration(quantization.CalibrationDataReader):  # type: ignore[misc]
        """Each calibration text as its own forward pass: no padding."""

        def __init__(self) -> None:
            self.feeds = _feeds(tokenize)

        def get_next(self) -> dict[str, Any] | None:
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".calibrating-") as folder:
        prepared = Path(folder) / "prepared.onnx"
        # Shapes and constant folding, as the quantiser advises (the symbolic pass cannot follow the
        # traced graph's reshapes, and is not needed for MatMul).
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        graph = onnx.load(str(prepared)).graph
        weights = {tensor.name for tensor in graph.initializer}
        between_activations = [node.name for node in graph.node
                               if node.op_type == "MatMul" and not any(name in weights for name in node.input)]
        quantization.quantize_static(
            str(prepared), str(target), Calibration(), quant_format=quantization.QuantFormat.QDQ,
            op_types_to_quantize=["MatMul"], nodes_to_exclude=between_activations, per_channel=True,
            activation_type=quantization.QuantType.QUInt8, weight_type=quantization.QuantType.QInt8,
            calibrate_method=quantization.CalibrationMethod.MinMax,
            extra_options={"OpTypesToExcludeOutputQuantization": ["MatMul"]})
    model = onnx.load(str(target))
    fuse_int8_bias(model)
    onnx.save(model, str(target))


def _feeds(tokenize: Callable[[str], list[int]]) -> Iterator[dict[str, Any]]:
    for text in calibration_texts():
        ids = np.asarray([tokenize(text)], dtype=np.int64)
        yield {"input_ids": ids, "attention_mask": np.ones_like(ids)}
