"""The stage this package holds: ``fold`` (constants, weight layouts, identities, repeated ops)."""

from __future__ import annotations

from qconvert.fold.dedupe import dedupe_ops
from qconvert.fold.drop_fake_quant import drop_fake_quant
from qconvert.fold.fold_constants import fold_constants
from qconvert.fold.hoist_layout import hoist_layout
from qconvert.fold.identity_arith import remove_identity_arith
from qconvert.ir.passes import Stage

# constants are folded again once the weight layouts have moved above their Q/DQ pairs
FOLD = Stage("fold", "fold", "constants, FakeQuant on weights (TF's float32 kernel), weight layouts, identities, "
             "repeated ops",
             (fold_constants, hoist_layout, fold_constants, drop_fake_quant, remove_identity_arith, dedupe_ops))
