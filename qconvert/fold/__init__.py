"""The ``fold`` stage: constant folding with the op table's float kernels (FakeQuant on
weights with TensorFlow's float32 kernel), weight layouts moved above their Q/DQ pairs
(HWIO → OHWI, depthwise → [1,H,W,C·M]), FakeQuant nodes dropped once legalized,
arithmetic that changes nothing removed, and an op computed twice on the same operands
computed once. ``stage`` declares the stage.

May import: ``qconvert.ir``, ``qconvert.ops``, ``qconvert.quant``, ``qconvert.errors``.
"""
