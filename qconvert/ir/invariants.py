"""Invariants of the IR, checked after every stage (after every pass with ``--debug``)."""

from __future__ import annotations

from qconvert.errors import InvariantError
from qconvert.ir.graph import Graph


def check_invariants(graph: Graph) -> None:
    """Every tensor a node mentions exists, is produced once, and is produced before it is
    read: the node list stays in execution order through every pass (the writer relies
    on it), which also rules out cycles. One pass over the nodes."""
    tensors = graph.tensors
    produced: set[str] = set(graph.inputs)
    for node in graph.nodes:
        for name in node.inputs:
            t = tensors.get(name) if name else None
            if name and t is None:
                raise InvariantError(f"node '{node.name}' ({node.op}) refers to missing tensor '{name}'")
            if name and t.data is None and not t.variable and name not in produced:  # type: ignore[union-attr]
                raise InvariantError(
                    f"node '{node.name}' ({node.op}) reads tensor '{name}' before any node produces it")
        for out in node.outputs:
            if out not in tensors:
                raise InvariantError(f"node '{node.name}' ({node.op}) refers to missing tensor '{out}'")
            if out in produced or tensors[out].data is not None:
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
