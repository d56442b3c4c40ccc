"""The ``inputs`` and ``legalize`` stages: graph inputs get their int8 parameters; TF ops become
TFLite ops; FakeQuant* become QUANTIZE → DEQUANTIZE pairs (TF's MLIR legalization).

Owns: ``input_ranges`` (``inputs``); ``fake_quant_pairs`` (a RESHAPE moved above its FakeQuant
for ``inputs``, the pairs for ``legalize``); ``dilated_conv``, ``clamps``, ``gelu`` (patterns of
TF ops) and ``tf_rewrites`` (the rewrite of each TensorFlow op, and the pass that applies them)
for ``legalize``; ``stage`` declares both. With the frontend, the one place that works on
TensorFlow op names.

May import: ``qconvert.frontend`` (the TF op table), ``qconvert.ir``, ``qconvert.ops``,
``qconvert.quant``, ``qconvert.errors``.
"""
