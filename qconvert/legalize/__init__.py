"""Stages 1 and 2 (``inputs``, ``legalize``): graph inputs get their int8 parameters; TF ops
become TFLite ops; FakeQuant* become QUANTIZE → DEQUANTIZE pairs (TF's MLIR legalization).

Owns: ``input_ranges`` (stage 1), ``fake_quant_pairs``, ``clamps``, ``dilated_conv`` and ``tf_ops``
(stage 2: the rewrite of each TensorFlow op). The one stage that works on TensorFlow op
names, with the frontend.

May import: ``qconvert.frontend`` (the TF op table), ``qconvert.ir``, ``qconvert.ops``,
``qconvert.quant``, ``qconvert.errors``.
"""
