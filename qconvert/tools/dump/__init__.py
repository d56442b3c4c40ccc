"""``qconvert dump``: what is in a .tflite model, for people (text) and scripts (JSON).

Works on any valid TFLite file (qconvert's, TensorFlow's, float or int8) and never
imports TensorFlow. For qconvert files the ``qconvert_requant`` metadata is decoded
and each record is checked against what TFLite's Prepare step computes from the
float32 scales in the file (``qconvert.quant``); a record that
disagrees is flagged (text: ``!! REQUANT MISMATCH``; JSON: ``"requant_ok": false``).

Selectors (``--ops``, ``--tensors``, ``--metadata``, ``--tensor NAME_OR_INDEX``)
restrict the output to those sections, in text and in JSON; with none, everything
but ``--tensor`` is shown.

JSON (``--json``, schema_version 1): every key is in docs/formats.md ("qconvert dump --json"),
the single description of the format; tests/test_docs.py checks that it names every key this
module writes.

Each tensor's ``type`` is written in the MLIR quant dialect's notation (the seed documents'
and TensorFlow's CHECK lines): ``!quant.uniform<i8:f32, 0.0078431377:-1>`` per tensor,
``!quant.uniform<i8<-127:127>:f32:0, {0.1,0.2}>`` per axis (a zero point of 0 is omitted, a
storage range is shown where it is narrower than the type's: the symmetric weights of
convolutions and FULLY_CONNECTED), ``!quant.uniform<i4:f32:{1:32}, {{...}}>`` for blockwise
(sub-channel) weights, blocks of 32 along dimension 1. Scales print as the shortest decimal
that gives back the file's float32. The text output shortens long scale lists.

Modules: ``describe`` (the file as this document), ``mlir`` (the ``type`` strings),
``requant_check`` (the records and their check), ``render`` (text and JSON); loading and the checks
other tools share are in ``qconvert.tools.tflite_file``.

May import: ``qconvert.tools.tflite_file``, ``qconvert.tools.jsonable``, ``qconvert.tools.text``,
``qconvert.schema``, numpy; ``qconvert.ops`` and ``qconvert.quant`` only where used (see ``describe``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from qconvert.tools.dump.describe import SCHEMA_VERSION, SECTIONS, describe
from qconvert.tools.dump.mlir import mlir_type, short_type
from qconvert.tools.dump.render import TYPE_SCALES, render_json, render_text
from qconvert.tools.tflite_file import load_tflite, quantization_problems, runtime_warnings

__all__ = ["SCHEMA_VERSION", "SECTIONS", "describe", "dump_model", "load_tflite", "mlir_type", "quantization_problems",
           "render_json", "render_text", "runtime_warnings", "short_type"]


def dump_model(path: str | os.PathLike, as_json: bool = False, sections: Iterable[str] | None = None,
               tensor: str | None = None) -> str:
    """``qconvert dump``: the text (or JSON) description of a .tflite file."""
    if as_json:
        return render_json(describe(path, sections, tensor))
    return render_text(describe(path, sections, tensor, type_scales=TYPE_SCALES))
