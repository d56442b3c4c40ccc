"""Integer-only execution of .tflite files (``qconvert run``): TFLite's int8 reference kernels
in numpy (``kernels``, ``transcendental``, ``reduce``, on ``int_math``), driven by the
file's integers and its ``qconvert_requant`` records (``interpreter``).

May import: ``qconvert.ops`` (rows, window arithmetic), ``qconvert.quant``,
``qconvert.schema`` (the reader and the metadata decoder), ``qconvert.errors``. Never the IR,
the converter or the tools: it executes files, not graphs.
"""
