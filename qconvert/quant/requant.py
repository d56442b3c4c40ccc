"""The requantization record of one operator, and the operand view it is computed from.

A :class:`Requant` holds what a TFLite int8 kernel derives in Prepare for one operator:
its multiplier/shift pairs, clamp, ADD/SUB left shift, LOGISTIC/TANH table, and the
binary64 factors of LiteRT's reference FULLY_CONNECTED. The converter computes it from
the IR (and stores it in the file's ``qconvert_requant`` metadata), ``dump`` recomputes
it from the file's tensors to check the stored one, and ``run`` executes from it. The
recipe per op is a row of the op table (``qconvert.ops``), reached through one function,
``qconvert.ops.requant``; both producers describe tensors as :class:`Operand`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


class Operand:
    """A tensor as a kernel's Prepare sees it: float32 scales (as Python floats), zero
    points and shape. ``scale`` is empty for a tensor without quantization."""

    # a plain class: as a frozen dataclass its generated methods cost 0.4 ms of every start-up
    __slots__ = ("dtype", "name", "scale", "shape", "zero_point")
    name: str
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str  # the stored type ("int8", "int4", ...) where the caller knows it

    def __init__(self, name: str, scale: tuple[float, ...], zero_point: tuple[int, ...], shape: tuple[int, ...],
                 dtype: str = "") -> None:
        self.name, self.scale, self.zero_point, self.shape, self.dtype = name, scale, zero_point, shape, dtype

    @property
    def s(self) -> float:
        """The (first) scale; ValueError when the tensor has none, as Prepare would fail."""
        if not self.scale:
            raise ValueError(f"tensor '{self.name}' has no quantization")
        return self.scale[0]

    @property
    def zp(self) -> int:
        return int(self.zero_point[0]) if self.zero_point else 0


@dataclass  # compared by value: the metadata read back from a file equals what was written (tests)
class Requant:
    """One operator's record (the layout is in ``qconvert.schema.requant_metadata``)."""

    op_index: int
    builtin: str  # BuiltinOperator name, e.g. "CONV_2D"
    act_min: int
    act_max: int
    left_shift: int
    pairs: list[tuple[int, int]] = field(default_factory=list)  # (multiplier, shift)
    per_channel: bool = False
    subgraph_index: int = 0
    table: list[int] | None = None  # LOGISTIC / TANH: 256 int8 outputs, indexed by uint8(x)
    wide: list[int] | None = None  # FULLY_CONNECTED: binary64 bit patterns, one per pair

    def fields(self) -> dict[str, object]:
        """The parts that a recomputation can check (everything but where the record sits)."""
        return {"per_channel": bool(self.per_channel), "act_min": int(self.act_min), "act_max": int(self.act_max),
                "left_shift": int(self.left_shift), "multipliers": [int(m) for m, _ in self.pairs],
                "shifts": [int(s) for _, s in self.pairs], "table": self.table, "wide": self.wide}


def operand(name: str, scale: Sequence[float], zero_point: Sequence[int], shape: Sequence[int],
            dtype: str = "") -> Operand:
    return Operand(name, tuple(map(float, scale)), tuple(map(int, zero_point)), tuple(map(int, shape)), dtype)
