"""The intermediate representation: plain data, no protobuf or flatbuffer imports.

Owns: ``Graph`` (tensors by name, nodes in execution order, an O(1) producer/consumer
index), ``Node``, ``Tensor``; the QUANTIZE → DEQUANTIZE pairs that carry quantization
parameters between stages (``qdq``) and who set them (``Origin``); the pass protocol
(``Context``, ``Pass``, ``Stage``: a named list of passes) and the invariant checks run after
each stage.

May import: ``qconvert.errors``, ``qconvert.quant`` (``QuantParams``), numpy.
"""

from qconvert.ir.graph import Graph, Node, Signature, Tensor
from qconvert.quant.params import QuantParams

__all__ = ["Graph", "Node", "QuantParams", "Signature", "Tensor"]
