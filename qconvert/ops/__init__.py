"""THE op table (``table.py``): one row per TFLite builtin with its quantization rule, int8
version, fixed output parameters, weight axis, fusions, float kernel (``float_kernels.py``) and
requantization recipe (``recipes.py``); the one requantization function; and the sliding-
window arithmetic (``windows.py``) that shapes, float and integer kernels share.

Passes, calibration, ``dump`` and the runtime look ops up here; nobody else branches on
TFLite op names.

May import: ``qconvert.quant``, ``qconvert.errors``, numpy. Not the IR: rows and kernels
work on plain values (a kernel reads a node's ``attrs`` and ``name`` and nothing else),
so the runtime can use the table without the converter's IR.
"""

from qconvert.ops.table import (
    CLAMPS,
    CUSTOM,
    HARD_SWISH_GATE,
    PRELU_GATE,
    Form16,
    Made,
    TABLE,
    OpRow,
    Rule,
    custom_row,
    float_operands,
    float_version,
    int8_version,
    is_custom,
    pool_fill,
    requant,
    row,
    uint8_version,
)

__all__ = ["CLAMPS", "CUSTOM", "HARD_SWISH_GATE", "PRELU_GATE", "TABLE", "Form16", "Made", "OpRow", "Rule",
           "custom_row", "float_operands", "float_version", "int8_version", "is_custom", "pool_fill", "requant",
           "row", "uint8_version"]
