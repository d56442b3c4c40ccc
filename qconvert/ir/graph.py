"""The intermediate representation: plain data, no protobuf or flatbuffer imports.

A :class:`Graph` holds tensors by name and an ordered list of nodes. Tensors are
referenced by name everywhere, so a pass rewires a node by editing its
``inputs``/``outputs`` lists. Those lists report edits to the graph, which keeps
its producer/consumer index current node by node: a look-up never scans the
graph, so a pass costs time linear in the nodes it touches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from qconvert.errors import GraphError
from qconvert.quant.params import QuantParams


_DTYPE_NAMES: dict[np.dtype, str] = {}


def dtype_name(dtype: np.dtype) -> str:
    """``dtype.name``, remembered per dtype: numpy computes the name in Python on every read
    (1.8 us; 2,400 reads in an EfficientViT_M0 conversion, 4 ms)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


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
    changes, so the producer/consumer index follows every edit without a full rebuild.
    Made by :func:`_edges`: list's own constructor, then the node, without a Python ``__init__``
    (a Node 0.72 -> 0.42 us; 2,500 made in an EfficientViT_M0 conversion)."""

    __slots__ = ("_node",)

    def _changed(self) -> None:
        raise NotImplementedError


class _Inputs(_Edges):
    __slots__ = ()

    def _changed(self) -> None:
        graph = self._node._graph
        if graph is not None:
            graph._dirty_in[self._node] = None


class _Outputs(_Edges):
    __slots__ = ()

    def _changed(self) -> None:
        graph = self._node._graph
        if graph is not None:
            graph._dirty_out[self._node] = None


def _edges(kind: type[_Edges], node: Node, names: Iterable[str]) -> _Edges:
    edges = kind(names)
    edges._node = node
    return edges


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
        self._inputs = _edges(_Inputs, self, inputs)
        self._outputs = _edges(_Outputs, self, outputs)
        self.attrs = {} if attrs is None else attrs
        self.name = name
        self.version = version

    @property
    def inputs(self) -> list[str]:
        return self._inputs

    @inputs.setter
    def inputs(self, names: Iterable[str]) -> None:
        self._inputs = _edges(_Inputs, self, names)
        if self._graph is not None:
            self._graph._dirty_in[self] = None

    @property
    def outputs(self) -> list[str]:
        return self._outputs

    @outputs.setter
    def outputs(self, names: Iterable[str]) -> None:
        self._outputs = _edges(_Outputs, self, names)
        if self._graph is not None:
            self._graph._dirty_out[self] = None

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
        # producer/consumer index, as of each node's indexed inputs and outputs; the nodes whose
        # inputs (outputs) changed since, for consumers() (producer()) to bring up to date
        self._indexed_in: dict[Node, tuple[str, ...]] = {}
        self._indexed_out: dict[Node, tuple[str, ...]] = {}
        self._producers: dict[str, dict[Node, None]] = {}
        self._consumers: dict[str, dict[Node, None]] = {}
        self._dirty_in: dict[Node, None] = {}
        self._dirty_out: dict[Node, None] = {}
        self._outputless: dict[Node, None] = {}  # indexed nodes with no outputs (dead to prune)
        # what prune looks at after its first full scan: tensors that lost their last reader or
        # maker, gained a maker or were added since, the tensor count it expects, the I/O it saw
        self._loose: dict[str, None] = {}
        self._tensor_count = -1
        self._pruned_io: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    # -- construction ---------------------------------------------------
    def add_tensor(self, tensor: Tensor) -> Tensor:
        if tensor.name not in self.tensors:
            self._tensor_count += 1
            self._loose[tensor.name] = None
        self.tensors[tensor.name] = tensor
        return tensor

    def add_const(self, name: str, value: np.ndarray, quant: QuantParams | None = None) -> str:
        name = self.unique_name(name)
        value = _contiguous(np.asarray(value))
        self.tensors[name] = Tensor(name, dtype_name(value.dtype), tuple(value.shape), value, quant)
        self._tensor_count += 1
        self._loose[name] = None
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
        # indexed at once, as a flush would: a node added is looked up next, not edited (propagate_quant_params
        # on EfficientViT_M0: 509 output-side flushes -> none, 1,455 input sides flushed -> 439)
        ins = dict.fromkeys(node._inputs)
        ins.pop("", None)
        self._indexed_in[node] = ins = tuple(ins)
        consumers = self._consumers
        for t in ins:
            consumers.setdefault(t, {})[node] = None
        self._indexed_out[node] = outs = tuple(dict.fromkeys(node._outputs))
        producers, loose = self._producers, self._loose
        for t in outs:
            producers.setdefault(t, {})[node] = None
            loose[t] = None
        if not outs:
            self._outputless[node] = None
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
            for t in node.attrs.get("_intermediates", ()):  # no longer mentioned by the node: for prune
                self._loose[t] = None
            self._dirty_in.pop(node, None)
            self._dirty_out.pop(node, None)
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
        ins, outs = self._indexed_in.pop(node), self._indexed_out.pop(node)
        self._outputless.pop(node, None)
        for t in ins:
            readers = self._consumers[t]
            del readers[node]
            if not readers:
                del self._consumers[t]
                self._loose[t] = None
        for t in outs:
            makers = self._producers[t]
            del makers[node]
            if not makers:
                del self._producers[t]
                self._loose[t] = None

    def _flush(self) -> None:
        """Bring the whole index up to date (prune needs both sides)."""
        if self._dirty_in:
            self._flush_in()
        if self._dirty_out:
            self._flush_out()

    def _flush_in(self) -> None:
        """Bring the consumer index up to date with the nodes whose inputs changed since. Each side
        of the index is kept apart and flushed by the look-up that needs it: most edits rewire
        inputs, which a producer() look-up need not wait for, and the outputs of a node whose
        inputs changed are not looked at (EfficientViT_M0: 4,978 input sides and 2,733 output
        sides re-indexed where 5,210 nodes were re-indexed whole)."""
        dirty, self._dirty_in = self._dirty_in, {}
        consumers, indexed, loose = self._consumers, self._indexed_in, self._loose
        for node in dirty:
            old_ins = indexed[node]
            readers = dict.fromkeys(node._inputs)
            readers.pop("", None)  # an absent optional input
            ins = tuple(readers)
            if ins != old_ins:
                for t in old_ins:
                    if t not in readers:
                        users = consumers[t]
                        del users[node]
                        if not users:
                            del consumers[t]
                            loose[t] = None
                for t in ins:
                    consumers.setdefault(t, {})[node] = None
                indexed[node] = ins

    def _flush_out(self) -> None:
        """Bring the producer index (and the outputless nodes) up to date with the nodes whose outputs changed."""
        dirty, self._dirty_out = self._dirty_out, {}
        producers, indexed, outputless, loose = self._producers, self._indexed_out, self._outputless, self._loose
        for node in dirty:
            old_outs = indexed[node]
            outs = tuple(dict.fromkeys(node._outputs))
            if outs != old_outs:
                for t in old_outs:
                    makers = producers[t]
                    del makers[node]
                    if not makers:
                        del producers[t]
                        loose[t] = None
                for t in outs:
                    producers.setdefault(t, {})[node] = None
                    loose[t] = None
                indexed[node] = outs
            if outs:
                outputless.pop(node, None)
            else:
                outputless[node] = None

    def producer(self, tensor: str) -> Node | None:
        if self._dirty_out:
            self._flush_out()
        makers = self._producers.get(tensor)
        if not makers:
            return None
        if len(makers) == 1:
            return next(iter(makers))
        return max(makers, key=self._key.__getitem__)  # as a scan in order would leave it

    def consumers(self, tensor: str) -> list[Node]:
        """Nodes that read ``tensor``, each once, in graph order."""
        if self._dirty_in:
            self._flush_in()
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
        """Drop nodes whose outputs nobody reads, and tensors nobody mentions.

        After a prune every node has a kept output and every tensor a mention, so the next one
        needs to look only at the tensors the index saw lose a reader or maker, gain a maker, or
        added since (``_loose``); most prunes then find nothing (EfficientViT_M0: 27 of 42). A
        tensor count or graph I/O it did not expect (a tensor added or deleted in ``tensors``
        directly, an output dropped) makes it scan everything, as the first prune does. A pass
        deletes from ``tensors`` only tensors nobody mentions any more, and sets a node's
        ``_intermediates`` once (EfficientViT_M0's 42 prunes: 7.8 -> 3.0 ms in-process)."""
        self._flush()
        keep = set(self.outputs)
        consumers = self._consumers  # kept current by remove_nodes below
        producers, io = self._producers, {*self.inputs, *self.outputs}
        loose, tensors = self._loose, self.tensors
        full = (self._pruned_io != (tuple(self.inputs), tuple(self.outputs)) or len(tensors) != self._tensor_count
                or any(t not in tensors for t in loose))
        # what the removals below leave loose, kept for the next prune: a reader removed after its
        # maker was passed (nodes out of order) leaves that maker dead, for the next prune to drop
        self._loose = {}
        if full or self._outputless or any(
                all(o not in keep and o not in consumers for o in node.outputs)
                for t in loose if t not in consumers and t not in keep for node in producers.get(t, ())):
            for node in reversed(self.nodes):  # readers first, so a chain of dead nodes goes at once
                for o in node.outputs:
                    if o in keep or o in consumers:
                        break
                else:
                    self.remove_nodes([node])
        removed = self._loose
        candidates = tensors if full else [k for k in {**loose, **removed} if k in tensors]
        unused = [k for k in candidates if k not in producers and k not in consumers and k not in io]
        if unused:
            mentioned = {t for node in self._indexed_in if "_intermediates" in node.attrs  # an LSTM's, mentioned
                         for t in node.attrs["_intermediates"]}  # by its node (every node is in _indexed_in)
            for k in unused:
                if k not in mentioned:
                    del tensors[k]
        self._loose = {k: None for k in removed if k in producers}
        self._tensor_count = len(tensors)
        self._pruned_io = (tuple(self.inputs), tuple(self.outputs))
        if os.environ.get("QCONVERT_CHECK_EACH_PASS", "") not in ("", "0"):  # the test suite: as a full scan?
            self._check_pruned()

    def _check_pruned(self) -> None:
        """What a full scan leaves: every tensor made, read, a graph input or output, or a node's
        intermediate. The incremental prune above relies on how passes edit ``tensors``; with
        QCONVERT_CHECK_EACH_PASS=1 (the test suite sets it) this checks it left what a full scan would."""
        mentioned = {*self._producers, *self._consumers, *self.inputs, *self.outputs,
                     *(t for node in self.nodes for t in node.attrs.get("_intermediates", ()))}
        left = [k for k in self.tensors if k not in mentioned]
        if left:
            raise GraphError(f"internal error: prune left tensor '{left[0]}' that nothing mentions "
                             f"({len(left)} in all); a pass edited graph.tensors in a way prune does not follow")

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)  # a snapshot already: edits during the loop do not change it

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

