"""The exact graph rewrites (providers/rewrites.py): on small graphs run by onnxruntime, and on the
exported models themselves."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from harness_mem.providers import int8 as recipes
from harness_mem.providers import light
from harness_mem.providers.embeddings import MiniLMEmbedder
from harness_mem.providers.rewrites import drop_nan_guards, fuse_int8_bias

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def run(model: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


def guarded_softmax() -> Any:
    """scores + mask, softmax over the last axis, then the traced attention's NaN guard."""
    nodes = [
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("IsNaN", ["p"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "p"], ["guarded"]),
        helper.make_node("Mul", ["guarded", "two"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "guard",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 4]) for name in ("scores", "mask")],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(np.zeros(1, np.float32), "zero"), numpy_helper.from_array(np.full(1, 2, np.float32), "two")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dropping_the_nan_guards_keeps_every_output_bit_for_bit() -> None:
    model = guarded_softmax()
    rng = np.random.default_rng(3)
    # Padding is -inf, as the traced mask gives it; every row keeps a key, as every text keeps its markers.
    mask = np.array([[0, 0, -np.inf, -np.inf], [0, -np.inf, -np.inf, -np.inf]], np.float32)
    feeds = {"scores": rng.standard_normal((2, 4)).astype(np.float32), "mask": mask}
    before = run(model, feeds)
    assert drop_nan_guards(model) == 1
    assert {node.op_type for node in model.graph.node} == {"Add", "Softmax", "Mul"}
    assert [t.name for t in model.graph.initializer] == ["two"]  # the guard's constant went with it
    assert np.array_equal(run(model, feeds), before)


def integer_layer(with_bias: bool) -> Any:
    """A static int8 linear layer as the quantiser writes it: Q/DQ of the input, a per-channel int8
    weight behind a DQ, a float MatMul, then the bias."""
    rng = np.random.default_rng(5)
    weight = rng.integers(-127, 128, (8, 3)).astype(np.int8)
    stored = [
        numpy_helper.from_array(np.array(0.05, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "x_zero"),
        numpy_helper.from_array(weight, "w"),
        numpy_helper.from_array(np.array([0.01, 0.02, 0.03], np.float32), "w_scale"),
        numpy_helper.from_array(np.zeros(3, np.int8), "w_zero"),
        numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "bias"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero"], ["w_dq"], axis=1),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["product"]),
    ]
    if with_bias:
        nodes.append(helper.make_node("Add", ["product", "bias"], ["out"]))
    else:
        nodes.append(helper.make_node("Relu", ["product"], ["out"]))
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 5, 3])], stored)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("with_bias", [True, False])
def test_an_int8_product_takes_in_its_bias_and_gives_the_same_output(with_bias: bool) -> None:
    model = integer_layer(with_bias)
    feeds = {"x": np.random.default_rng(7).standard_normal((2, 5, 8)).astype(np.float32) * 3}
    before = run(model, feeds)
    assert fuse_int8_bias(model) == 1
    kinds = [node.op_type for node in model.graph.node]
    assert kinds == ["QuantizeLinear", "MatMulIntegerToFloat"] + ([] if with_bias else ["Relu"])
    assert len(model.graph.node[1].input) == (7 if with_bias else 6)
    # The bias is added inside the kernel rather than after it: the same sums, rounded once differently.
    assert np.allclose(run(model, feeds), before, rtol=1e-6, atol=1e-5)


@pytest.mark.slow
@pytest.mark.real_model
def test_the_exported_models_run_no_guard_and_no_separate_bias() -> None:
    # The export itself (every model is made from it) has no NaN guard; the static int8 model's
    # products carry their bias, and no weight is dequantised at run time.
    static = MiniLMEmbedder(quantization="static")
    static.embed(["makes the exports if they are missing"])
    base = static.fingerprint.removesuffix(f":{recipes.RECIPES['static'].tag}")
    exported = onnx.load(str(light.export_path(base)), load_external_data=False)
    assert not [node for node in exported.graph.node if node.op_type == "IsNaN"]
    model = onnx.load(str(light.export_path(base, recipes.RECIPES["static"])), load_external_data=False)
    products = [node for node in model.graph.node if node.op_type == "MatMulIntegerToFloat"]
    assert len(products) == 36  # six layers: query, key, value, attention output, two feed-forward
    assert all(len(node.input) == 7 for node in products)
    weights = {tensor.name for tensor in model.graph.initializer}
    assert not [node for node in model.graph.node if node.op_type == "DequantizeLinear" and node.input[0] in weights]
