"""Quantization arithmetic as TensorFlow and TFLite do it, bit for bit.

Owns: ``QuantParams`` (the quantized type every layer shares) and four families of
arithmetic, each emulating one TensorFlow component:

* ``params``: what the MLIR converter writes into the file (FakeQuant nudging, input
  ranges, calibration statistics, weights, biases), in double as the C++ does;
* ``fake_quant``: the TF CPU FakeQuant kernels training ran, in float32 op for op;
* ``multipliers``: what TFLite's int8 kernels derive in Prepare from the file's float32
  scales (``QuantizeMultiplier``, per-op multipliers, tables, clamps);
* ``fixed_point``: the kernels' integer arithmetic at Eval (gemmlowp);
* ``rounding``: ``std::round`` on doubles and floats.

May import: ``qconvert.errors``, numpy. Nothing else of qconvert: the IR, the op table,
the stages, the runtime and the tools all build on this package.
"""

from qconvert.quant.fake_quant import *  # noqa: F401,F403
from qconvert.quant.fixed_point import *  # noqa: F401,F403
from qconvert.quant.multipliers import *  # noqa: F401,F403
from qconvert.quant.params import *  # noqa: F401,F403
from qconvert.quant.rounding import *  # noqa: F401,F403
