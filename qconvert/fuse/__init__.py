"""The ``fuse`` stage (after ``fold``, before ``calibrate``): TensorFlow's optimize-pass fusions
on the float graph, before any range is measured or propagated. ``into_op``: a zero PAD, a
bias add, a BatchNorm's scale, an input scale or offset, and a ReLU/ReLU6/ReLU1 go into the
convolution or FULLY_CONNECTED beside them; ``activation_patterns``: hard-swish and PReLU
written out in ops become one op; ``reshapes``: a Dense on an N-D input becomes one
FULLY_CONNECTED, element-wise ops move above RESHAPEs, RESHAPE chains merge, reductions keep
their dimensions. ``stage`` declares the stage.

May import: ``qconvert.fold`` (its identity-arithmetic pass runs again here), ``qconvert.ir``,
``qconvert.ops``, ``qconvert.quant``, ``qconvert.errors``.
"""
