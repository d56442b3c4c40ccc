"""SavedModel directories and Keras ``.keras`` / ``.h5`` files, frozen with TensorFlow.

Only this module imports TensorFlow, and only when such a file is converted (``pip
install qconvert[tf]``). Its variables are frozen into constants
(``convert_variables_to_constants_v2``, as for a hand-frozen .pb), and the GraphDef goes
through the same pipeline as a .pb file.

* SavedModel: the ``serving_default`` signature (or the only one), frozen as it is
  (an unknown batch dimension stays unknown, as in a .pb frozen from it).
* Keras file: ``model(x, training=False)`` on an input of the model's shape with batch 1,
  the input named ``input`` (as ``tf.function(lambda x: model(x, training=False))``
  frozen by hand would give).
* Either way, the signature TensorFlow's converter writes for it (``serving_default``; a
  SavedModel's signature keys; a Keras model's input/output names as ``from_keras_model`` gives
  them), handed on for the output file's SignatureDef.

A Keras LSTM layer (tf_keras) runs its ``standard_lstm`` function, marked with the attribute
``api_implements = "lstm_<uuid>"``: TensorFlow's converter keys its fusion into one
UNIDIRECTIONAL_SEQUENCE_LSTM on that attribute. Freezing inlines the function (its body is a
``While`` loop), so each such call is put back: the frozen GraphDef calls the function again
(a ``PartitionedCall`` whose library function keeps the attribute and its signature), with
the frozen weights as operands. The frontend's GraphDef reader recognises it there.
"""

from __future__ import annotations

import os
from pathlib import Path

from qconvert.errors import ConversionError

KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")


def is_tf_model(path: str | os.PathLike) -> bool:
    p = Path(path)
    return (p.is_dir() and (p / "saved_model.pb").is_file()) or (p.is_file() and p.suffix in KERAS_SUFFIXES)


def _tensorflow():  # type: ignore[no-untyped-def]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError:
        raise ConversionError("reading a SavedModel or Keras file needs TensorFlow: pip install 'qconvert[tf]'"
                              " (or freeze the model to a .pb)") from None
    return tf


def _keras_version_of(path: Path) -> str:
    """The ``keras_version`` a ``.keras`` archive's metadata.json records ("" when unknown)."""
    import json
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return str(json.loads(archive.read("metadata.json")).get("keras_version", ""))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return ""


def _load_keras(tf, path: Path):  # type: ignore[no-untyped-def]
    """A Keras file with the Keras that wrote it: a ``.keras`` archive whose metadata says Keras 2
    with tf_keras first, any other with Keras 3 (TensorFlow 2.21's Keras) first, asked by its own
    package (``tf.keras`` is tf_keras under ``TF_USE_LEGACY_KERAS=1``, which then failed on a Keras 3
    file); then the others (Keras 3 cannot read some Keras 2 files: a tf_keras LSTM's
    ``time_major`` argument, for one)."""
    keras3 = legacy = None
    try:
        import keras

        keras3 = keras.models.load_model if int(str(keras.__version__).split(".")[0]) >= 3 else None
    except ImportError:
        pass
    try:
        import tf_keras

        legacy = tf_keras.models.load_model
    except ImportError:
        pass
    order = [legacy, tf.keras.models.load_model, keras3] if _keras_version_of(path).startswith("2.") else \
        [tf.keras.models.load_model, keras3, legacy]
    first = None
    for load in dict.fromkeys(f for f in order if f is not None):  # tf.keras is one of the others
        try:
            return load(str(path), compile=False)
        except Exception as exc:  # noqa: BLE001 - Keras raises many kinds; the next library may read it
            first = first or exc
    raise first  # type: ignore[misc]  # none reads it: the first library's reason is the one to show


# a signature as the frontend hands it on: (key, [(name, input node)], [(name, output node)]), names sorted
FrozenSignature = tuple[str, list[tuple[str, str]], list[tuple[str, str]]]


def freeze(path: str | os.PathLike) -> tuple[bytes, list[str], list[str], FrozenSignature | None]:
    """(GraphDef bytes, input names, output names, the signature TensorFlow's converter writes for it)
    of a SavedModel directory or Keras file."""
    tf = _tensorflow()
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    p = Path(path)
    try:
        if p.is_dir():
            loaded = tf.saved_model.load(str(p))
            signatures = dict(getattr(loaded, "signatures", {}) or {})
            if not signatures:
                raise ConversionError(f"SavedModel '{p}' has no signature to convert")
            name = "serving_default" if "serving_default" in signatures else sorted(signatures)[0]
            if len(signatures) > 1 and name != "serving_default":
                raise ConversionError(f"SavedModel '{p}' has signatures {sorted(signatures)}; none is serving_default")
            # The signature itself is frozen, as TensorFlow's guide does by hand: a wrapper
            # function would add a call level and prefix every tensor name.
            concrete = signatures[name]
            keys = _saved_model_keys(concrete)
        else:
            model = _load_keras(tf, p)
            shape = [1 if d is None else d for d in model.inputs[0].shape]
            if len(model.inputs) != 1:
                raise ConversionError(f"Keras model '{p}' has {len(model.inputs)} inputs; export a SavedModel instead")
            concrete = tf.function(lambda x: model(x, training=False)).get_concrete_function(
                tf.TensorSpec(shape, tf.float32, name="input"))
            name, keys = "serving_default", _keras_keys(model)
        original = concrete.graph.as_graph_def()
        # a Keras LSTM's loop is put back into one call: lowering it to TF1 control flow first
        # would only leave dead placeholders behind
        frozen = convert_variables_to_constants_v2(concrete, lower_control_flow=not _lstm_calls(original))
        graph_def = _keep_lstm_calls(frozen.graph.as_graph_def(), original)
    except ConversionError:
        raise
    except Exception as exc:  # TensorFlow raises many kinds; one line for the user
        raise ConversionError(f"cannot load '{p}' with TensorFlow: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    inputs = [t.name.split(":")[0] for t in frozen.inputs if t.dtype != tf.resource]
    outputs = [t.name.split(":")[0] for t in frozen.outputs]
    signature = None
    if keys is not None and len(keys[0]) == len(inputs) and len(keys[1]) == len(outputs):
        in_keys, out_keys = keys
        signature = (name, sorted(zip(in_keys, inputs)), sorted(zip(out_keys, outputs)))
    return graph_def.SerializeToString(deterministic=True), inputs, outputs, signature


def _saved_model_keys(concrete) -> tuple[list[str], list[str]] | None:  # type: ignore[no-untyped-def]
    """The signature's input keys in the order of its placeholders and its output keys in the order
    of its outputs (a signature's outputs are a dict, flattened in key order), or None when they
    cannot be matched."""
    _, kwargs = concrete.structured_input_signature
    by_placeholder = {spec.name: key for key, spec in (kwargs or {}).items()}
    placeholders = [t.name.split(":")[0] for t in concrete.inputs if t.dtype.name != "resource"]
    outputs = concrete.structured_outputs
    if not isinstance(outputs, dict) or any(p not in by_placeholder for p in placeholders):
        return None
    return [by_placeholder[p] for p in placeholders], sorted(outputs)


def _keras_keys(model) -> tuple[list[str], list[str]]:  # type: ignore[no-untyped-def]
    """The names TensorFlow's from_keras_model gives the signature: tf_keras (Keras 2) uses the
    input and output layers' names, Keras 3 the input tensor's name and ``output_<i>``."""
    if type(model).__module__.startswith("tf_keras."):
        return list(model.input_names), list(model.output_names)
    return [t.name for t in model.inputs], [f"output_{i}" for i in range(len(model.outputs))]


LSTM_IMPLEMENTS = "lstm_"  # the prefix of a Keras LSTM function's api_implements (tf_keras recurrent_v2/lstm.py)


def _lstm_calls(graph_def) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Call-node name → FunctionDef, for every call of a function whose ``api_implements``
    starts with ``lstm_``, in the top graph and in every library function (names are the call
    node's own, without the prefixes inlining adds)."""
    lstm = {f.signature.name: f for f in graph_def.library.function
            if f.attr["api_implements"].s.decode(errors="replace").startswith(LSTM_IMPLEMENTS)}
    calls: dict[str, object] = {}
    bodies = [list(graph_def.node)] + [list(f.node_def) for f in graph_def.library.function]
    for nodes in bodies:
        for n in nodes:
            if n.op in ("PartitionedCall", "StatefulPartitionedCall") and n.attr["f"].func.name in lstm:
                calls[n.name] = lstm[n.attr["f"].func.name]
    return calls


def _with_callees(fdef, graph_def) -> list:  # type: ignore[no-untyped-def]
    """``fdef`` and every library function it calls, directly or not (a While's cond and body), so
    that TensorFlow can load the GraphDef again."""
    library = {f.signature.name: f for f in graph_def.library.function}
    found, work = [], [fdef]
    seen = {fdef.signature.name}
    while work:
        f = work.pop()
        found.append(f)
        for n in f.node_def:
            for value in n.attr.values():
                names = [value.func.name] if value.HasField("func") else [g.name for g in value.list.func]
                for name in names:
                    if name in library and name not in seen:
                        seen.add(name)
                        work.append(library[name])
    return found


def _keep_lstm_calls(frozen, original):  # type: ignore[no-untyped-def]
    """The frozen GraphDef with each inlined Keras LSTM call put back as one call.

    Inlining names the body's nodes ``<call path>/<node>`` and passes the operands and results
    through Identity nodes ``Func/<call path>/input/_k`` and ``Func/<call path>/output/_k``
    (k counts up in argument order). Those operands become the call's inputs; a reader of an
    output Identity reads the call's result it returns (by the function's ``ret`` map)."""
    calls = _lstm_calls(original)
    if not calls:
        return frozen
    import re

    from tensorflow.core.framework import graph_pb2

    by_name = {n.name: n for n in frozen.node}
    entry = re.compile(r"^Func/(.+)/(input|output)/_(\d+)$")
    sites: dict[str, object] = {}
    for name in by_name:
        m = entry.match(name)
        if m is None:
            continue
        path = m.group(1)
        for call, fdef in calls.items():
            if path == call or path.endswith("/" + call):
                sites[path] = fdef
    if not sites:
        return frozen
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(frozen.versions)
    out.library.CopyFrom(frozen.library)
    have = {f.signature.name for f in out.library.function}
    renamed: dict[str, str] = {}  # "Func/<path>/output/_k" → "<path>:j"
    call_nodes = []
    for path, fdef in sites.items():
        ins = sorted(((int(m.group(3)), by_name[n]) for n in by_name
                      if (m := entry.match(n)) and m.group(1) == path and m.group(2) == "input"), key=lambda kv: kv[0])
        if len(ins) != len(fdef.signature.input_arg):  # type: ignore[attr-defined]
            return frozen  # not the shape inlining gives: leave the loop as it is (refused later, in one line)
        ret_node = {fdef.ret[a.name].split(":")[0]: j  # type: ignore[attr-defined]
                    for j, a in enumerate(fdef.signature.output_arg)}  # type: ignore[attr-defined]
        for n in by_name:
            m = entry.match(n)
            if m and m.group(1) == path and m.group(2) == "output":
                src = by_name[n].input[0]
                inner = src[len(path) + 1:].split(":")[0] if src.startswith(path + "/") else None
                if inner not in ret_node:
                    return frozen
                j = ret_node[inner]
                renamed[n] = path if j == 0 else f"{path}:{j}"
        call = out.node.add()
        call.name, call.op = path, "PartitionedCall"
        call.input.extend(i.input[0] for _, i in ins)  # an earlier call's result: renamed below
        call.attr["f"].func.name = fdef.signature.name  # type: ignore[attr-defined]
        call.attr["Tin"].list.type.extend(a.type for a in fdef.signature.input_arg)  # type: ignore[attr-defined]
        call.attr["Tout"].list.type.extend(a.type for a in fdef.signature.output_arg)  # type: ignore[attr-defined]
        call_nodes.append(call)
        for needed in _with_callees(fdef, original):  # the function and the loop bodies it calls
            if needed.signature.name not in have:
                out.library.function.add().CopyFrom(needed)
                have.add(needed.signature.name)
    for call in call_nodes:  # a call reading another call's result (stacked LSTMs)
        for k, i in enumerate(call.input):
            node, _, _ = i.partition(":")
            if node in renamed:
                call.input[k] = renamed[node]
    inside = tuple(p + "/" for p in sites) + tuple(f"Func/{p}/" for p in sites)
    for n in frozen.node:
        if n.name.startswith(inside):
            continue
        kept = out.node.add()
        kept.CopyFrom(n)
        del kept.input[:]
        for i in n.input:
            ctrl = i.startswith("^")
            base = i.lstrip("^")
            node, _, port = base.partition(":")
            if node in renamed:
                kept.input.append(("^" + renamed[node].split(":")[0]) if ctrl else renamed[node])
            elif node.startswith(inside):
                if not ctrl:
                    return frozen  # a reader of the body's insides: not a call boundary
            else:
                kept.input.append(i)
    # the call nodes first would break the topological order TensorFlow does not need; keep
    # them after the nodes they read (append order: the readers reference them by name only)
    order = [n for n in out.node if n not in call_nodes] + call_nodes
    del out.node[:]
    out.node.extend(order)
    return out
