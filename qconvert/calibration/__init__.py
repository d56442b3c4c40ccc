"""Calibration of float graphs (the ``calibrate`` stage, between ``fuse`` and ``prepare``):
samples from files or images (``data``), the float model run on them with the op table's
kernels (``executor``, also ``compare``'s float side), per-tensor statistics and the
methods that turn them into ranges (``methods``), and TensorFlow's rules for which ranges
are kept (``calibrate``). ``stage`` declares the stage.

May import: ``qconvert.ir``, ``qconvert.ops``, ``qconvert.quant``, ``qconvert.errors``; Pillow
(images) inside a function.
"""
