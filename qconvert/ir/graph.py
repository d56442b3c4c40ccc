"""The intermediate representation: plain data, no protobuf or flatbuffer imports.

A :class:`Graph` holds tensors by name and an ordered list of nodes. Tensors are
referenced by name everywhere, so a pass rewires a node by editing its
``inputs``/``outputs`` lists. Those lists report edits to the graph, which keeps
its producer/consumer index current node by node: a look-up never scans the
graph, so a pass costs time linear in the nodes it touches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from qconvert.errors import GraphError
from qconvert.quant.params import QuantParams


def _contiguous(value: np.ndarray) -> np.ndarray:
    """``value`` in C order. A weight transposed with its last axis moved first (HWIO→OHWI,
    a MatMul's [in, out] → [out, in]) is copied in panels of 16 source rows: numpy's own
    strided copy of a large transpose misses the cache on every element (3×3×512×512:
    10.1 ms plainly, 4.7 ms in panels; 1×1×2048×512: 3.9 vs 1.4 ms)."""
    if value.flags.c_contiguous:
        return value
    if value.ndim < 2 or value.size < 65536 or not np.moveaxis(value, 0, -1).flags.c_contiguous:
        return np.ascontiguousarray(value)
    rows, cols = value.shape[0], value.size // value.shape[0]
    source = np.moveaxis(value, 0, -1).reshape(cols, rows)
    out = np.empty((rows, cols), value.dtype)
    for start in range(0, cols, 16):
        out[:, start:start + 16] = source[start:start + 16].T
    return out.reshape(value.shape)


@dataclass
class Tensor:
    name: str
    dtype: str  # numpy dtype name: "float32", "int8", "int32", ...
    shape: tuple[int, ...] | None = None
    data: np.ndarray | None = None
    quant: QuantParams | None = None
    # blockwise (sub-channel) weights: (the FLOAT16 scale tensor's name, block size along the last dim)
    blockwise: tuple[str, int] | None = None
    # a quantized constant: a digest of the float constant it was quantized from (dtype, shape,
    # bytes), so that equal constants are stored once only where TensorFlow stores them once
    source: bytes | None = None
    # a state tensor (an LSTM's output and cell state): no producer, no data; the op reads it at
    # zero first and updates it in place (TFLite's VARIABLE tensor)
    variable: bool = False

    @property
    def is_const(self) -> bool:
        return self.data is not None


class _Edges(list):
    """A node's input or output tensor names. A list that tells the node's graph when it
    changes, so the producer/consumer index follows every edit without a full rebuild."""

    __slots__ = ("_node",)

    def __init__(self, node: Node, names: Iterable[str]) -> None:
        super().__init__(names)
        self._node = node

    def _changed(self) -> None:
        graph = self._node._graph
        if graph is not None:
            graph._dirty[self._node] = None


def _reporting(method):  # type: ignore[no-untyped-def]
    def edit(self, *args):  # type: ignore[no-untyped-def]
        result = method(self, *args)
        self._changed()
        return result

    edit.__name__ = method.__name__
    return edit


for _method in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend",
                "insert", "pop", "remove", "clear", "sort", "reverse"):
    setattr(_Edges, _method, _reporting(getattr(list, _method)))
del _method


class Node:
    """One operation. Nodes compare by identity: passes look them up in sets and lists.

    ``inputs`` and ``outputs`` may be reassigned or edited in place; the graph that
    holds the node sees the change.
    """

    __slots__ = ("op", "_inputs", "_outputs", "attrs", "name", "version", "_graph")

    def __init__(self, op: str, inputs: Iterable[str], outputs: Iterable[str],
                 attrs: dict[str, Any] | None = None, name: str = "", version: int = 1) -> None:
        self._graph: Graph | None = None
        self.op = op
        self._inputs = _Edges(self, inputs)
        self._outputs = _Edges(self, outputs)
        self.attrs = {} if attrs is None else attrs
        self.name = name
        self.version = version

    @property
    def inputs(self) -> list[str]:
        return self._inputs

    @inputs.setter
    def inputs(self, names: Iterable[str]) -> None:
        self._inputs = _Edges(self, names)
        self._inputs._changed()

    @property
    def outputs(self) -> list[str]:
        return self._outputs

    @outputs.setter
    def outputs(self, names: Iterable[str]) -> None:
        self._outputs = _Edges(self, names)
        self._outputs._changed()

    def __str__(self) -> str:
        return f"{self.op} '{self.name}'"

    def __repr__(self) -> str:
        return f"Node({self.op!r}, {list(self.inputs)!r}, {list(self.outputs)!r}, name={self.name!r})"


class Signature:
    """A TFLite SignatureDef of the graph: ``key`` ("serving_default"), and each signature input and
    output name with the position of its tensor in ``graph.inputs`` / ``graph.outputs`` (positions,
    not tensor names: passes replace an I/O tensor in its slot, e.g. a QUANTIZE added at the boundary),
    in the order the file lists them."""

    # a plain class: as a frozen dataclass its generated methods cost 0.3 ms of every start-up
    __slots__ = ("inputs", "key", "outputs")
    key: str
    inputs: tuple[tuple[str, int], ...]
    outputs: tuple[tuple[str, int], ...]

    def __init__(self, key: str, inputs: tuple[tuple[str, int], ...], outputs: tuple[tuple[str, int], ...]) -> None:
        self.key, self.inputs, self.outputs = key, inputs, outputs


class Graph:
    """Tensors by name plus nodes in order. ``inputs``/``outputs`` name graph tensors.

    Nodes are kept in a linked list with ordered float keys, so inserting next to a
    node costs O(1) and ``nodes`` is rebuilt only when read after a change. The
    producer/consumer index is updated per edited node (see :class:`_Edges`), and
    consumers come back in graph order, as a full scan would give them.
    """

    def __init__(self) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.metadata: dict[str, bytes] = {}
        self.input_names: list[str] = []  # placeholder names, given back to int8 inputs
        self.output_names: list[str] = []  # names the user asked for, given to outputs at the end
        self.signature: Signature | None = None  # the model's signature, written as its SignatureDef
        self._names: set[str] = set()
        # node order: a doubly linked list plus increasing keys for comparisons
        self._key: dict[Node, float] = {}
        self._next: dict[Node, Node | None] = {}
        self._prev: dict[Node, Node | None] = {}
        self._head: Node | None = None
        self._tail: Node | None = None
        self._order: tuple[Node, ...] | None = ()
        # producer/consumer index, as of each node's ``_indexed`` edges
        self._indexed: dict[Node, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._producers: dict[str, dict[Node, None]] = {}
        self._consumers: dict[str, dict[Node, None]] = {}
        self._dirty: dict[Node, None] = {}

    # -- construction ---------------------------------------------------
    def add_tensor(self, tensor: Tensor) -> Tensor:
        self.tensors[tensor.name] = tensor
        return tensor

    def add_const(self, name: str, value: np.ndarray, quant: QuantParams | None = None) -> str:
        name = self.unique_name(name)
        value = _contiguous(np.asarray(value))
        self.tensors[name] = Tensor(name, value.dtype.name, tuple(value.shape), value, quant)
        return name

    def add_node(self, node: Node, *, before: Node | None = None, after: Node | None = None,
                 at_start: bool = False) -> Node:
        """Add ``node`` at the end, or right before ``before``, right after ``after``, or first."""
        if node._graph is not None:
            raise GraphError(f"node '{node.name}' is already in a graph")
        if at_start:
            after, nxt = None, self._head
        elif before is not None:
            after = self._prev[before]
            nxt = before
        elif after is not None:
            nxt = self._next[after]
        else:
            after, nxt = self._tail, None
        self._link(node, after, nxt)
        node._graph = self
        self._indexed[node] = ((), ())
        self._dirty[node] = None
        return node

    def _link(self, node: Node, prev: Node | None, nxt: Node | None) -> None:
        lo = self._key[prev] if prev is not None else None
        hi = self._key[nxt] if nxt is not None else None
        if lo is None:
            key = 0.0 if hi is None else hi - 1.0
        elif hi is None:
            key = lo + 1.0
        else:
            key = (lo + hi) / 2
            if not lo < key < hi:  # the gap is used up: renumber every node once
                self._renumber()
                key = (self._key[prev] + self._key[nxt]) / 2  # type: ignore[index]
        self._key[node] = key
        self._prev[node], self._next[node] = prev, nxt
        if prev is None:
            self._head = node
        else:
            self._next[prev] = node
        if nxt is None:
            self._tail = node
        else:
            self._prev[nxt] = node
        self._order = None

    def _renumber(self) -> None:
        node, k = self._head, 0.0
        while node is not None:
            self._key[node] = k
            node, k = self._next[node], k + 1.0

    def move_after(self, node: Node, anchor: Node) -> None:
        """Move ``node`` to right after ``anchor`` in the node order."""
        self._unlink(node)
        self._link(node, anchor, self._next[anchor])

    def _unlink(self, node: Node) -> None:
        prev, nxt = self._prev.pop(node), self._next.pop(node)
        del self._key[node]
        if prev is None:
            self._head = nxt
        else:
            self._next[prev] = nxt
        if nxt is None:
            self._tail = prev
        else:
            self._prev[nxt] = prev
        self._order = None

    def remove_nodes(self, dead: Iterable[Node]) -> None:
        for node in dead:
            if node._graph is not self:
                continue
            self._unlink(node)
            self._unindex(node)
            self._dirty.pop(node, None)
            node._graph = None

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes in order (a snapshot: edit the graph through its methods)."""
        if self._order is None:
            order, node = [], self._head
            while node is not None:
                order.append(node)
                node = self._next[node]
            self._order = tuple(order)
        return self._order

    @nodes.setter
    def nodes(self, nodes: Iterable[Node]) -> None:
        nodes = list(nodes)
        self.remove_nodes(self.nodes)
        for node in nodes:
            self.add_node(node)

    def unique_name(self, base: str) -> str:
        if not self._names:
            self._names = set(self.tensors) | {n.name for n in self.nodes}
        name, k = base, 1
        while name in self._names or name in self.tensors:
            name = f"{base}_{k}"
            k += 1
        self._names.add(name)
        return name

    # -- look-ups -------------------------------------------------------
    def _unindex(self, node: Node) -> None:
        ins, outs = self._indexed.pop(node)
        for t in ins:
            readers = self._consumers[t]
            del readers[node]
            if not readers:
                del self._consumers[t]
        for t in outs:
            makers = self._producers[t]
            del makers[node]
            if not makers:
                del self._producers[t]

    def _flush(self) -> None:
        """Bring the index up to date with the nodes edited since the last look-up."""
        dirty, self._dirty = self._dirty, {}
        for node in dirty:
            self._unindex(node)
            readers = dict.fromkeys(node.inputs)
            readers.pop("", None)  # an absent optional input
            ins, outs = tuple(readers), tuple(dict.fromkeys(node.outputs))
            for t in ins:
                self._consumers.setdefault(t, {})[node] = None
            for t in outs:
                self._producers.setdefault(t, {})[node] = None
            self._indexed[node] = (ins, outs)

    def producer(self, tensor: str) -> Node | None:
        if self._dirty:
            self._flush()
        makers = self._producers.get(tensor)
        if not makers:
            return None
        if len(makers) == 1:
            return next(iter(makers))
        return max(makers, key=self._key.__getitem__)  # as a scan in order would leave it

    def consumers(self, tensor: str) -> list[Node]:
        """Nodes that read ``tensor``, each once, in graph order."""
        if self._dirty:
            self._flush()
        readers = self._consumers.get(tensor)
        if not readers:
            return []
        if len(readers) == 1:
            return list(readers)
        return sorted(readers, key=self._key.__getitem__)

    def is_const(self, tensor: str) -> bool:
        t = self.tensors.get(tensor)
        return t is not None and t.data is not None

    def const(self, tensor: str) -> np.ndarray | None:
        t = self.tensors.get(tensor)
        return None if t is None else t.data

    def scalar_operand(self, node: Node, value: float, rel_tol: float = 0.0) -> str | None:
        """The non-constant operand of a binary ``node`` whose other operand is a float32 scalar
        constant equal to ``value`` (within ``rel_tol``, relative to max(1, |value|)); else None.
        What pattern fusions (hard-swish, PReLU, GELU) look for."""
        if len(node.inputs) < 2:
            return None
        a, b = node.inputs[:2]
        for other, c in ((a, self.const(b)), (b, self.const(a))):
            if (c is not None and c.dtype == np.float32 and c.size == 1 and not self.is_const(other)
                    and abs(float(c.reshape(-1)[0]) - float(np.float32(value))) <= rel_tol * max(1.0, abs(value))):
                return other
        return None

    # -- edits ----------------------------------------------------------
    def replace_all_uses(self, old: str, new: str) -> None:
        """Make every reader of ``old`` (nodes and graph outputs) read ``new``."""
        for node in self.consumers(old):
            node.inputs = [new if i == old else i for i in node.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def prune(self) -> None:
        """Drop nodes whose outputs nobody reads, and tensors nobody mentions."""
        if self._dirty:
            self._flush()
        keep = set(self.outputs)
        consumers = self._consumers  # kept current by remove_nodes below
        producers, io = self._producers, {*self.inputs, *self.outputs}
        for node in reversed(self.nodes):  # readers first, so a chain of dead nodes goes at once
            for o in node.outputs:
                if o in keep or o in consumers:
                    io.update(node.attrs.get("_intermediates", ()))  # an LSTM's, mentioned by a kept node
                    break
            else:
                self.remove_nodes([node])
        unused = [k for k in self.tensors if k not in producers and k not in consumers and k not in io]
        for k in unused:
            del self.tensors[k]

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

