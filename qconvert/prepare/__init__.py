"""Stage 4 (``fuse`` and ``prepare``), TensorFlow's prepare-quantize: bias adds and BatchNorm
into weights and bias, activations into the op before them (``fuse``); then parameters
propagated op by op by the op table's rule (bias = in×w, same-scale, fixed-output,
requantize where scales conflict), ``--default-ranges``, and the refusal of anything that
cannot be quantized fully (``propagate``, ``default_ranges``, ``quantizable``).

May import: ``qconvert.ir``, ``qconvert.ops``, ``qconvert.quant``, ``qconvert.errors``.
"""
