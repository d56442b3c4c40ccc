"""The pass protocol: what a pass receives besides the graph, and what it returns.

    def a_pass(graph: Graph, ctx: Context) -> bool     # True when it changed the graph

``Context`` carries what used to travel on the side (flags on ``Graph``, a ``_float``
node attribute): the user's options, the notes for the user, the ops left in float under
``--allow-float``, whether the graph is post-training quantized (TensorFlow's float32
scale arithmetic), and the requantization records the quantize stage computes for the
writer. ``Origin`` says who decided a tensor's quantization parameters.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable

from qconvert.ir.graph import Graph, Node
from qconvert.options import ConvertOptions


class Origin(enum.Enum):
    """Who decided a QUANTIZE node's parameters. Immutable origins (a FakeQuant, an input
    range, a fixed-output op, weights and biases, calibration) are never changed by
    propagation; propagated ones give way (TensorFlow's quantization driver)."""

    FAKE_QUANT = "fake_quant"
    INPUT_RANGE = "input_range"
    FIXED = "fixed"
    WEIGHT = "weight"
    WEIGHT_VALUES = "weight_values"  # an affine op's weights without FakeQuant: from their values
    BIAS = "bias"
    CALIBRATION = "calibration"
    RANGES_FILE = "ranges_file"
    DEFAULT_RANGE = "default"
    PROPAGATED = "propagated"
    REQUANTIZE = "requant"

    def __repr__(self) -> str:  # as Graph.dump shows it
        return f"Origin.{self.name}"

    @property
    def immutable(self) -> bool:
        return self not in (Origin.DEFAULT_RANGE, Origin.PROPAGATED, Origin.REQUANTIZE)


# Context and Stage are compared by identity (nothing compares two): dataclass's generated __eq__ and
# __hash__ (and Context's __repr__) cost 0.3 ms of every start-up
@dataclass(eq=False, repr=False)
class Context:
    """What a pass may know besides the graph."""

    options: ConvertOptions = field(default_factory=ConvertOptions)  # what the user asked for
    calibration: Any = None  # calibration.calibrate.Calibration: the samples, statistics and ranges to use
    notes: list[str] = field(default_factory=list)  # warnings for the user (the CLI prints them)
    allow_float: bool = False  # --allow-float: ops that cannot be quantized stay float
    float_ops: set[Node] = field(default_factory=set)  # the ops that stay float (with allow_float)
    legacy_float_scale: bool = False  # post-training quantization: TF's float32 scale arithmetic
    requant: list[Any] = field(default_factory=list)  # quant.requant.Requant records, for the writer
    qat16: bool = False  # the graph's activation FakeQuants are 16-bit (set by the inputs stage)
    int16_ops: set[Node] = field(default_factory=set)  # --int16: the ops made 16x8 in an int8 model

    def note(self, text: str) -> None:
        self.notes.append(text)

    @property
    def activation_bits(self) -> int:
        """16 under ``--activations int16`` (TensorFlow's 16x8 mode), else 8."""
        return 16 if self.qat16 or self.options.precision.activations == "int16" else 8

    def bits(self, node: Node | None) -> int:
        """The activation bits of ``node``: 16 for an op of a ``--int16`` island, else
        :attr:`activation_bits` (``None``, a graph input's producer: the model's)."""
        return 16 if node is not None and node in self.int16_ops else self.activation_bits


Pass = Callable[[Graph, Context], bool]


@dataclass(frozen=True, eq=False)
class Stage:
    """A step of the pipeline: its passes in order. Each stage package declares its stages in
    its ``stage.py``; ``converter.pipeline.STAGES`` lists them in order. The name is what
    ``--dump-after`` and ``stop_before`` take."""

    name: str
    package: str  # qconvert/<package>/stage.py declares it
    summary: str  # one line for --help and the README
    passes: tuple[Pass, ...]
