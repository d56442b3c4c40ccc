"""Ops neither table knows, as TFLite custom ops (``--allow-custom-ops``).

    x ──▶ TFLite_Detection_PostProcess (a NodeDef TensorFlow cannot run) ──▶ y, y:1, y:2, y:3
  ⇒ x ──▶ CUSTOM {custom_code: "TFLite_Detection_PostProcess", custom_options: the attributes} ──▶ …

What TensorFlow 2.21's converter writes, measured (``tests/e2e/test_custom_ops.py``): the custom
code is the TF op name; the options are a FlexBuffer map of the node's attributes whose names do
not start with ``_`` (keys sorted), ints as Int, floats as Float, bools as Bool, strings as String,
a ``type`` attribute as the TFLite TensorType number (float32 = 0; the writer maps it); every output is float32 with
an empty shape (its shape is unknown to the converter). TensorFlow ignores a node's ``_output_shapes`` there, and an op
that then needs the shape stays unconverted (measured: a Conv2D after a custom op becomes ``CUSTOM:Conv2D``, which no
runtime has). qconvert takes the shapes from ``_output_shapes`` where the node lists them all, static; an op reading
an output of unknown shape (through FakeQuant and Identity) is one ConversionError naming both. The writer encodes the map
(``qconvert.schema``); here the node keeps it as ``(key, kind, value)`` triples.

The outputs are ``name``, ``name:1``, ... up to the highest port any node or ``--outputs`` reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from qconvert.errors import ConversionError
from qconvert.frontend.graphdef import RawNode
from qconvert.ir import Graph, Node, Tensor
from qconvert.ops import CUSTOM

_KINDS = {"i": "int", "f": "float", "b": "bool", "s": "string"}


def custom_ports(nodes: Sequence[RawNode], out_refs: Sequence[str]) -> dict[str, int]:
    """How many outputs each node has, as far as the graph shows: the highest port read, plus one."""
    ports: dict[str, int] = {}
    refs = [r for n in nodes for r in n.inputs if not r.startswith("^")] + list(out_refs)
    for ref in refs:
        name, _, port = ref.rpartition(":")
        if name and port.isdigit():
            ports[name] = max(ports.get(name, 1), int(port) + 1)
    return ports


def custom_options(raw: RawNode) -> tuple[tuple[str, str, object], ...]:
    """The attributes TensorFlow writes into the custom options, as (key, kind, value), sorted by key."""
    entries = []
    for key in sorted(raw.attrs):
        if key.startswith("_"):
            continue
        kind, value = raw.kinds.get(key, ""), raw.attrs[key]
        if kind in _KINDS and not (kind == "s" and isinstance(value, bytes)):
            entries.append((key, _KINDS[kind], value))
        elif kind == "type":  # written as TFLite's TensorType number (the writer knows the schema's codes)
            entries.append((key, "type", value))
        elif kind:
            raise ConversionError(
                f"node '{raw.name}' ({raw.op}): attribute '{key}' is a {kind if kind != 's' else 'non-UTF-8 string'} "
                f"{'' if kind != 'type' else f'({value}) '}, which qconvert cannot write into a custom op's "
                f"options yet (it writes int, float, bool, string and type attributes)")
    return tuple(entries)


def _listed_shapes(raw: RawNode, n_outputs: int) -> list[tuple[int, ...]] | None:
    """The node's ``_output_shapes`` when it lists every output, each fully static."""
    listed = raw.attrs.get("_output_shapes")
    if not isinstance(listed, list) or len(listed) < n_outputs:
        return None
    shapes = []
    for s in listed[:n_outputs]:
        if s is None or any(int(d) < 0 for d in s):
            return None
        shapes.append(tuple(int(d) for d in s))
    return shapes


def add_custom(graph: Graph, raw: RawNode, data_inputs: list[str], n_outputs: int) -> list[str]:
    """The CUSTOM node for ``raw``: float32 outputs, of the shapes ``_output_shapes`` lists, else of
    unknown (empty) shape. Returns the outputs whose shape is unknown."""
    for name in data_inputs:
        if graph.tensors[name].dtype != "float32":
            raise ConversionError(
                f"node '{raw.name}' ({raw.op}) reads '{name}' of dtype {graph.tensors[name].dtype}; "
                f"custom ops on float32 tensors only")
    outputs = [raw.name if k == 0 else f"{raw.name}:{k}" for k in range(n_outputs)]
    shapes = _listed_shapes(raw, n_outputs)
    for k, out in enumerate(outputs):
        graph.add_tensor(Tensor(out, "float32", shapes[k] if shapes else ()))
    attrs = {"custom_code": raw.op, "custom_options": custom_options(raw)}
    graph.add_node(Node(CUSTOM, data_inputs, outputs, attrs, name=raw.name))
    return [] if shapes else outputs


def check_known_shape(raw: RawNode, data_inputs: Sequence[str], unknown: dict[str, str]) -> None:
    """A node reading a custom op's output of unknown shape: a FakeQuant passes it on (its output is
    as unknown), any other op needs the shape and is refused in one line. ``unknown``: tensor → the
    custom op it comes from."""
    read = [t for t in data_inputs if t in unknown]
    if not read:
        return
    if raw.op.startswith("FakeQuantWithMinMax"):
        unknown[raw.name] = unknown[read[0]]
        return
    source = unknown[read[0]]
    raise ConversionError(
        f"node '{raw.name}' ({raw.op}) reads '{read[0]}', an output of custom op '{source}' whose shape qconvert "
        f"does not know (TensorFlow's converter leaves such an op unconverted); export the graph with its shapes "
        f"(tf.io.write_graph(..., add_shapes=True) gives the node '_output_shapes'), or end the graph at the custom "
        f"op with --outputs")

