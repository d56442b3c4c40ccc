"""Invariants of the IR, checked after every stage (after every pass with ``--debug``)."""

from __future__ import annotations

from qconvert.errors import InvariantError
from qconvert.ir.graph import Graph


def check_invariants(graph: Graph) -> None:
    """Every tensor a node mentions exists, is produced once, and is produced before it is
    read: the node list stays in execution order through every pass (the writer relies
    on it), which also rules out cycles. One pass over the nodes."""
    tensors = graph.tensors
    produced: set[str] = {name for name in graph.inputs if name in tensors}  # a missing input is reported as missing
    for node in graph.nodes:
        for name in node._inputs:
            # most operands were produced already: one set look-up each (the check 0.66 -> 0.4 ms a stage, EfficientViT_M0)
            if name in produced or not name:
                continue
            t = tensors.get(name)
            if t is None:
                raise InvariantError(f"node '{node.name}' ({node.op}) refers to missing tensor '{name}'")
            if t.data is None and not t.variable:
                raise InvariantError(
                    f"node '{node.name}' ({node.op}) reads tensor '{name}' before any node produces it")
        for out in node._outputs:
            t = tensors.get(out)
            if t is None:
                raise InvariantError(f"node '{node.name}' ({node.op}) refers to missing tensor '{out}'")
            if out in produced or t.data is not None:
                raise InvariantError(f"tensor '{out}' is produced twice")
            produced.add(out)
    for name in graph.outputs:
        if name not in graph.tensors:
            raise InvariantError(f"graph output '{name}' is missing")
    if graph.signature is not None:
        for kind, ports, n in (("input", graph.signature.inputs, len(graph.inputs)),
                               ("output", graph.signature.outputs, len(graph.outputs))):
            for name, position in ports:
                if not 0 <= position < n:
                    raise InvariantError(f"signature '{graph.signature.key}' {kind} '{name}' refers to graph "
                                         f"{kind} {position} ({n} {kind}s)")
