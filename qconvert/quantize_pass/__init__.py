"""The ``quantize`` stage: DQ → op → Q becomes the int8 op; constants become int8/int32 data;
graph inputs and outputs become int8 (``graph_io``); names, op versions, and the
requantization records (``qconvert.ops.requant``) for the writer. Also ``blockwise``, the
stage that takes the place of calibrate, prepare and quantize under ``--block-size``: int4
weights in blocks, activations float. Both are declared in ``stage``.

May import: ``qconvert.fuse`` (the activation fusion runs again), ``qconvert.ir``,
``qconvert.ops``, ``qconvert.quant``, ``qconvert.errors``. Not ``schema/``: a conversion runs
to its end without LiteRT; the converter hands the result to the writer.
"""
