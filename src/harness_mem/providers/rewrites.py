"""Exact rewrites of the exported graphs: each changes which kernels run, not what they compute.

onnxruntime fuses much of a traced graph by itself, but not these; profiled on ~200-word texts
(onnxruntime's own per-node timings, two threads), they were about a third of a forward pass:

- :func:`drop_nan_guards`: the traced attention follows each softmax with ``Where(IsNaN(p), 0, p)``,
  for a row whose every key is masked (its scores all -inf). No row here is: every text keeps its two
  markers, so the guard only reads and rewrites a (batch, heads, tokens, tokens) tensor twice a layer
  (a fifth of a pass's time, in every model).
- :func:`fuse_int8_bias`: in the static int8 model each ``DequantizeLinear`` pair feeding a weight's
  ``MatMul`` becomes one ``MatMulIntegerToFloat`` of the int8 tensors, as onnxruntime makes it too,
  but with the following bias ``Add`` taken in as its bias input, which onnxruntime leaves as a
  separate pass over the output (a tenth of the static model's time on long texts). The same sum,
  rounded inside the kernel: the model's vectors came out bit for bit the same on the texts tried.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def drop_nan_guards(model: Any) -> int:
    """Remove every ``Where(IsNaN(x), c, x)`` from ``model`` (an ``onnx.ModelProto``), its readers
    reading ``x``; returns how many were removed. Exact wherever ``x`` holds no NaN."""
    graph = model.graph
    producer = {output: node for node in graph.node for output in node.output}
    replaced: dict[str, str] = {}
    dropped: set[int] = set()
    for node in graph.node:
        test = producer.get(node.input[0]) if node.op_type == "Where" else None
        if test is not None and test.op_type == "IsNaN" and test.input[0] == node.input[2]:
            replaced[node.output[0]] = node.input[2]
            dropped |= {id(node), id(test)}
    _keep(graph, [node for node in graph.node if id(node) not in dropped], replaced)
    return len(replaced)


def fuse_int8_bias(model: Any) -> int:
    """Make each ``MatMul(DequantizeLinear(a), DequantizeLinear(w))`` of ``model``, ``w`` a stored
    weight, one ``MatMulIntegerToFloat`` (taking in a bias ``Add`` that alone reads its output);
    returns how many were made. Dequantisers nothing reads any more are dropped."""
    from onnx import helper

    graph = model.graph
    stored = {tensor.name: tensor for tensor in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    readers: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    made: dict[int, Any] = {}
    dropped: set[int] = set()
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        left, right = (producer.get(name) for name in node.input)
        if not (left is not None and right is not None and left.op_type == right.op_type == "DequantizeLinear"
                and right.input[0] in stored and len(left.input) == len(right.input) == 3):
            continue
        inputs = [left.input[0], right.input[0], left.input[1], right.input[1], left.input[2], right.input[2]]
        output = node.output[0]
        after = readers[output]
        if len(after) == 1 and after[0].op_type == "Add":
            bias = [name for name in after[0].input if name != output]
            if len(bias) == 1 and bias[0] in stored and len(stored[bias[0]].dims) == 1:
                inputs.append(bias[0])
                output = after[0].output[0]
                dropped.add(id(after[0]))
        made[id(node)] = helper.make_node("MatMulIntegerToFloat", inputs, [output], name=f"{node.name}_int8",
                                          domain="com.microsoft")
    nodes = [made.get(id(node), node) for node in graph.node if id(node) not in dropped]
    outputs = {output.name for output in graph.output}
    while True:  # a dequantiser whose readers all became integer products
        read = {name for node in nodes for name in node.input} | outputs
        kept = [node for node in nodes if node.op_type != "DequantizeLinear" or node.output[0] in read]
        if len(kept) == len(nodes):
            break
        nodes = kept
    _keep(graph, nodes, {})
    return len(made)


def _keep(graph: Any, nodes: list[Any], replaced: dict[str, str]) -> None:
    """Make ``nodes`` the graph's (in their order), their inputs renamed by ``replaced``, and drop
    the stored tensors no node reads any more."""
    for node in nodes:
        for i, name in enumerate(node.input):
            if name in replaced:
                node.input[i] = replaced[name]
    del graph.node[:]
    graph.node.extend(nodes)
    read = {name for node in nodes for name in node.input}
    tensors = [tensor for tensor in graph.initializer if tensor.name in read]
    del graph.initializer[:]
    graph.initializer.extend(tensors)
