"""The intermediate representation: plain data, no protobuf or flatbuffer imports.

A :class:`Graph` holds tensors by name and an ordered list of nodes. Tensors are
referenced by name everywhere, so a pass rewires a node by editing its
``inputs``/``outputs`` lists. Producer/consumer look-ups go through an index that
is rebuilt lazily after a change, so a pass that asks many questions between
edits pays for one scan, not one per question.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np


@dataclass(frozen=True)
class QuantParams:
    """Affine quantization: ``real = (q - zero_point) * scale``.

    Scales are kept as Python floats (doubles): TensorFlow's converter computes
    bias scales from the double-precision scales and only rounds to float32 when
    it writes the file. ``axis`` is None for per-tensor parameters.
    """

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int | None = None
    qmin: int = -128
    qmax: int = 127
    dtype: str = "int8"

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    def same_as(self, other: QuantParams | None) -> bool:
        """Equal as TensorFlow compares quantized types (scale, zero point, axis, storage)."""
        return (
            other is not None
            and self.dtype == other.dtype
            and self.axis == other.axis
            and self.zero_point == other.zero_point
            and self.scale == other.scale
            and (self.qmin, self.qmax) == (other.qmin, other.qmax)
        )

    def __str__(self) -> str:
        if self.axis is None:
            return f"{self.dtype}<{self.scale[0]:.6g}:{self.zero_point[0]}>"
        return (
            f"{self.dtype}<axis={self.axis}, {len(self.scale)} scales "
            f"{min(self.scale):.6g}..{max(self.scale):.6g}>"
        )


@dataclass
class Tensor:
    name: str
    dtype: str  # numpy dtype name: "float32", "int8", "int32", ...
    shape: tuple[int, ...] | None = None
    data: np.ndarray | None = None
    quant: QuantParams | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None


@dataclass(eq=False)  # nodes compare by identity: passes look them up in lists
class Node:
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    version: int = 1

    def __str__(self) -> str:
        return f"{self.op} '{self.name}'"


class Graph:
    """Tensors by name plus nodes in order. ``inputs``/``outputs`` name graph tensors."""

    def __init__(self) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.metadata: dict[str, bytes] = {}
        self.input_names: list[str] = []  # placeholder names, given back to int8 inputs
        self.output_names: list[str] = []  # names the user asked for, given to outputs at the end
        self.notes: list[str] = []  # warnings for the user (printed on stderr by the CLI)
        self.allow_float = False  # --allow-float: ops that cannot be quantized stay float
        self._producer: dict[str, Node] | None = None
        self._consumers: dict[str, list[Node]] | None = None
        self._names: set[str] = set()

    # -- construction ---------------------------------------------------
    def add_tensor(self, tensor: Tensor) -> Tensor:
        self.tensors[tensor.name] = tensor
        return tensor

    def add_const(self, name: str, value: np.ndarray, quant: QuantParams | None = None) -> str:
        name = self.unique_name(name)
        value = np.asarray(value)
        if not value.flags.c_contiguous:
            value = np.ascontiguousarray(value)
        self.tensors[name] = Tensor(name, value.dtype.name, tuple(value.shape), value, quant)
        return name

    def add_node(self, node: Node, index: int | None = None) -> Node:
        if index is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(index, node)
        self.touch()
        return node

    def remove_nodes(self, dead: Iterable[Node]) -> None:
        dead_ids = {id(n) for n in dead}
        if dead_ids:
            self.nodes = [n for n in self.nodes if id(n) not in dead_ids]
            self.touch()

    def unique_name(self, base: str) -> str:
        if not self._names:
            self._names = set(self.tensors) | {n.name for n in self.nodes}
        name, k = base, 1
        while name in self._names or name in self.tensors:
            name = f"{base}_{k}"
            k += 1
        self._names.add(name)
        return name

    def touch(self) -> None:
        """Invalidate the producer/consumer index after an edit."""
        self._producer = None
        self._consumers = None

    # -- look-ups -------------------------------------------------------
    def _index(self) -> None:
        producer: dict[str, Node] = {}
        consumers: dict[str, list[Node]] = {}
        for node in self.nodes:
            for out in node.outputs:
                producer[out] = node
            for inp in node.inputs:
                if inp:
                    lst = consumers.setdefault(inp, [])
                    if not lst or lst[-1] is not node:
                        lst.append(node)
        self._producer, self._consumers = producer, consumers

    def producer(self, tensor: str) -> Node | None:
        if self._producer is None:
            self._index()
        return self._producer.get(tensor)  # type: ignore[union-attr]

    def consumers(self, tensor: str) -> list[Node]:
        if self._consumers is None:
            self._index()
        return self._consumers.get(tensor, [])  # type: ignore[union-attr]

    def is_const(self, tensor: str) -> bool:
        t = self.tensors.get(tensor)
        return t is not None and t.data is not None

    def const(self, tensor: str) -> np.ndarray | None:
        t = self.tensors.get(tensor)
        return None if t is None else t.data

    # -- edits ----------------------------------------------------------
    def replace_all_uses(self, old: str, new: str) -> None:
        """Make every reader of ``old`` (nodes and graph outputs) read ``new``."""
        for node in self.consumers(old):
            node.inputs = [new if i == old else i for i in node.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]
        self.touch()

    def prune(self) -> None:
        """Drop nodes whose outputs nobody reads, and tensors nobody mentions."""
        live = set(self.outputs)
        kept: list[Node] = []
        for node in reversed(self.nodes):
            if any(o in live for o in node.outputs):
                kept.append(node)
                live.update(i for i in node.inputs if i)
        kept.reverse()
        if len(kept) != len(self.nodes):
            self.nodes = kept
            self.touch()
        used = live | set(self.inputs)
        for node in self.nodes:
            used.update(node.outputs)
        self.tensors = {k: v for k, v in self.tensors.items() if k in used}

    def topological_order(self) -> list[Node]:
        """Nodes ordered so that producers come first (stable for sorted input)."""
        producer = {o: n for n in self.nodes for o in n.outputs}
        pending = {id(n): sum(1 for i in set(n.inputs) if i in producer) for n in self.nodes}
        readers: dict[int, list[Node]] = {}
        for n in self.nodes:
            for i in set(n.inputs):
                if i in producer:
                    readers.setdefault(id(producer[i]), []).append(n)
        ready = deque(n for n in self.nodes if pending[id(n)] == 0)
        order: list[Node] = []
        while ready:
            node = ready.popleft()
            order.append(node)
            for r in readers.get(id(node), []):
                pending[id(r)] -= 1
                if pending[id(r)] == 0:
                    ready.append(r)
        if len(order) != len(self.nodes):
            stuck = [n for n in self.nodes if pending[id(n)] > 0]
            raise GraphError(f"the graph has a cycle through node '{stuck[0].name}' ({stuck[0].op})")
        return order

    def __iter__(self) -> Iterator[Node]:
        return iter(list(self.nodes))

    def dump(self) -> str:
        """Human-readable IR, the text that ``--dump-after`` prints."""
        lines = [f"graph inputs={self.inputs} outputs={self.outputs}"]

        def desc(name: str) -> str:
            t = self.tensors.get(name)
            if t is None:
                return f"{name}:?"
            shape = "x".join(str(d) for d in t.shape) if t.shape is not None else "?"
            q = f" {t.quant}" if t.quant is not None else ""
            c = " const" if t.data is not None else ""
            return f"{name}:{t.dtype}[{shape}]{q}{c}"

        for node in self.nodes:
            attrs = {k: v for k, v in node.attrs.items() if not isinstance(v, np.ndarray)}
            a = f" {attrs}" if attrs else ""
            lines.append(
                f"  {', '.join(desc(o) for o in node.outputs)} = {node.op}"
                f"({', '.join(desc(i) for i in node.inputs)}){a}"
            )
        return "\n".join(lines)


class ConversionError(Exception):
    """A problem with the model or the request: reported as one line, exit 1."""


class GraphError(ConversionError):
    pass


class UsageError(Exception):
    """A problem with the command line: exit 2."""
