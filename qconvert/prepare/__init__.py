"""The ``prepare`` stage, TensorFlow's prepare-quantize: parameters propagated op by op by the
op table's rule (bias = in×w, same-scale, fixed-output, requantize where scales conflict;
``propagate``), ``--default-ranges`` (``default_ranges``), and the refusal of anything that
cannot be quantized fully (``quantizable``). ``stage`` declares the stage.

May import: ``qconvert.ir``, ``qconvert.ops``, ``qconvert.quant``, ``qconvert.errors``.
"""
