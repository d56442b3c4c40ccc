"""Bad inputs: each ends with one clear line on stderr, the right exit code and no output.

Broken graphs are built by editing models/example_qat.pb with our own GraphDef
message classes, so no TensorFlow is needed.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable

import pytest

from qconvert.cli import main
from qconvert.frontend.graphdef import GraphDef

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "models" / "example_qat.pb"
RANGE = ["--inputs-range", "input=-1,1"]


def check(capsys, argv: list[str], code: int, words: list[str], out: Path | None, before: bytes | None = None) -> str:
    """Run main(argv); assert the exit code, one stderr line naming the problem, and the output untouched."""
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert lines[0].startswith("qconvert: usage error:" if code == 2 else "qconvert: error:"), err
    for w in words:
        assert w.lower() in err.lower(), f"{w!r} not in {err!r}"
    if out is not None:
        if before is None:
            assert not out.exists(), f"{out} was written"
        else:
            assert out.read_bytes() == before, f"{out} was changed"
        leftovers = [n for n in os.listdir(out.parent) if n.startswith(f".{out.name}.")]
        assert not leftovers, f"temporary files left: {leftovers}"
    return lines[0]


@pytest.fixture(params=[False, True], ids=["no-output", "old-output"])
def out(request, tmp_path: Path) -> tuple[Path, bytes | None]:
    """The -o target: absent, or pre-created with b"old" (must stay unchanged)."""
    path = tmp_path / "out.tflite"
    if request.param:
        path.write_bytes(b"old")
        return path, b"old"
    return path, None


# ---------------------------------------------------------------------------
# Files that are not a GraphDef
# ---------------------------------------------------------------------------


def _tflite_bytes() -> bytes:
    from qconvert import api

    return api.convert_bytes(EXAMPLE, {None: (-1.0, 1.0)})


@pytest.mark.parametrize(
    "name, make, words",
    [
        ("empty", lambda: b"", ["empty"]),
        ("truncated", lambda: EXAMPLE.read_bytes()[: len(EXAMPLE.read_bytes()) // 2 + 3], ["GraphDef"]),
        ("random", lambda: bytes(__import__("random").Random(1).randrange(256) for _ in range(4096)), ["GraphDef"]),
        ("tflite", _tflite_bytes, ["TFLite"]),
    ],
)
def test_bad_model_file(tmp_path: Path, capsys, out, name: str, make: Callable[[], bytes], words: list[str]) -> None:
    pb = tmp_path / f"{name}.pb"
    pb.write_bytes(make())
    path, before = out
    check(capsys, [str(pb), *RANGE, "-o", str(path)], 1, [str(pb), *words], path, before)


def test_savedmodel_directory(tmp_path: Path, capsys, out) -> None:
    sm = tmp_path / "sm"
    (sm / "variables").mkdir(parents=True)
    (sm / "saved_model.pb").write_bytes(b"\x08\x01\x12\x00")
    path, before = out
    check(capsys, [str(sm), *RANGE, "-o", str(path)], 1, ["SavedModel"], path, before)


def test_plain_directory(tmp_path: Path, capsys, out) -> None:
    d = tmp_path / "plain"
    d.mkdir()
    path, before = out
    check(capsys, [str(d), *RANGE, "-o", str(path)], 1, ["directory"], path, before)


def test_missing_file(tmp_path: Path, capsys, out) -> None:
    path, before = out
    check(capsys, [str(tmp_path / "nope.pb"), *RANGE, "-o", str(path)], 1, ["nope.pb", "no such file"], path, before)


# ---------------------------------------------------------------------------
# Usage errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, words",
    [
        (["--inputs-range", "image=-1,1"], ["'image'", "input"]),
        ([*RANGE, "--inputs", "image"], ["image", "input"]),
        ([*RANGE, "--outputs", "logitz"], ["logitz", "output"]),
    ],
    ids=["inputs-range", "inputs", "outputs"],
)
def test_unknown_names_list_the_real_ones(capsys, out, args: list[str], words: list[str]) -> None:
    path, before = out
    check(capsys, [str(EXAMPLE), *args, "-o", str(path)], 2, words, path, before)


@pytest.mark.parametrize("rng", ["1,", "a,b", "3,1", "nan,1", "-inf,1", "1,1"])
def test_malformed_range(capsys, out, rng: str) -> None:
    path, before = out
    check(capsys, [str(EXAMPLE), "--inputs-range", f"input={rng}", "-o", str(path)], 2, [rng], path, before)


def test_missing_range_on_the_input(capsys, out) -> None:
    path, before = out
    check(capsys, [str(EXAMPLE), "-o", str(path)], 1, ["input", "--inputs-range input=MIN,MAX"], path, before)


# ---------------------------------------------------------------------------
# Broken graphs
# ---------------------------------------------------------------------------


def _graph() -> GraphDef:
    return GraphDef.FromString(EXAMPLE.read_bytes())


def _node(g: GraphDef, name: str):
    for n in g.node:
        if n.name == name:
            return n
    raise KeyError(name)


def _set_const(g: GraphDef, name: str, value: float) -> None:
    t = _node(g, name).attr["value"].tensor
    t.ClearField("tensor_content")
    del t.float_val[:]
    t.float_val.append(value)


def _min_gt_max(g: GraphDef) -> None:
    _set_const(g, "conv1/fq/min", 5.0)
    _set_const(g, "conv1/fq/max", 1.0)


def _num_bits_4(g: GraphDef) -> None:
    _node(g, "conv1/fq").attr["num_bits"].i = 4


def _cycle(g: GraphDef) -> None:  # Relu reads conv1/fq, which reads Relu
    r = _node(g, "Relu")
    r.input[0] = "conv1/fq"


def _missing_input(g: GraphDef) -> None:
    _node(g, "Relu").input[0] = "no_such_node"


def _duplicate_name(g: GraphDef) -> None:
    _node(g, "Relu6").name = "Relu"


def _unknown_rank(g: GraphDef) -> None:
    shape = _node(g, "input").attr["shape"].shape
    shape.ClearField("dim")
    shape.unknown_rank = True


def _huge_dim(g: GraphDef) -> None:
    _node(g, "input").attr["shape"].shape.dim[1].size = 10**9


def _conv3d(g: GraphDef) -> None:
    _node(g, "Conv2D").op = "Conv3D"


def _nchw(g: GraphDef) -> None:
    _node(g, "Conv2D").attr["data_format"].s = b"NCHW"


GRAPH_CASES = [
    ("min-gt-max", _min_gt_max, ["conv1/fq", "min"]),
    ("nan-min", lambda g: _set_const(g, "conv1/fq/min", math.nan), ["conv1/fq"]),
    ("inf-min", lambda g: _set_const(g, "conv1/fq/min", -math.inf), ["conv1/fq"]),
    ("inf-max", lambda g: _set_const(g, "conv1/fq/max", math.inf), ["conv1/fq"]),
    ("num-bits-4", _num_bits_4, ["conv1/fq", "num_bits"]),
    ("cycle", _cycle, ["cycle"]),
    ("missing-input", _missing_input, ["no_such_node"]),
    ("duplicate-name", _duplicate_name, ["Relu", "two nodes named"]),
    ("unknown-rank", _unknown_rank, ["input", "rank"]),
    ("huge-dim", _huge_dim, ["input"]),
    ("unsupported-op", _conv3d, ["Conv3D", "Conv2D", "DepthwiseConv2dNative"]),
    ("nchw", _nchw, ["Conv2D", "NCHW"]),
]


@pytest.mark.parametrize("case, edit, words", GRAPH_CASES, ids=[c[0] for c in GRAPH_CASES])
def test_broken_graph(tmp_path: Path, capsys, out, case: str, edit, words: list[str]) -> None:
    g = _graph()
    edit(g)
    pb = tmp_path / f"{case}.pb"
    pb.write_bytes(g.SerializeToString())
    path, before = out
    check(capsys, [str(pb), *RANGE, "-o", str(path)], 1, words, path, before)


# ---------------------------------------------------------------------------
# Output path problems
# ---------------------------------------------------------------------------


def test_output_in_a_missing_directory(tmp_path: Path, capsys) -> None:
    path = tmp_path / "no" / "such" / "dir" / "m.tflite"
    check(capsys, [str(EXAMPLE), *RANGE, "-o", str(path)], 1, ["does not exist"], None)
    assert not (tmp_path / "no").exists()


def test_output_not_writable(tmp_path: Path, capsys) -> None:
    if os.geteuid() == 0:  # root writes into 0o500 directories anyway: use a file as the "directory"
        parent = tmp_path / "a_file"
        parent.write_bytes(b"x")
        path = parent / "m.tflite"
        check(capsys, [str(EXAMPLE), *RANGE, "-o", str(path)], 1, ["cannot write", "a_file"], None)
        assert parent.read_bytes() == b"x"
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "m.tflite").write_bytes(b"old")
    ro.chmod(0o500)
    try:
        check(capsys, [str(EXAMPLE), *RANGE, "-o", str(ro / "m.tflite")], 1, ["cannot write", "permission"],
              ro / "m.tflite", b"old")
    finally:
        ro.chmod(0o700)


# ---------------------------------------------------------------------------
# Cases bench/fuzz.py found (once internal errors; fixed)
# ---------------------------------------------------------------------------


def _convert_edited(tmp_path: Path, capsys, edit) -> None:
    g = _graph()
    edit(g)
    pb = tmp_path / "bug.pb"
    pb.write_bytes(g.SerializeToString())
    path = tmp_path / "out.tflite"
    check(capsys, [str(pb), *RANGE, "-o", str(path)], 1, [], path)


def test_bug_huge_fake_quant_max(tmp_path: Path, capsys) -> None:
    _convert_edited(tmp_path, capsys, lambda g: _set_const(g, "pw1/fq/max", 1e10))


def test_empty_attr_means_its_default(tmp_path: Path) -> None:
    # An AttrValue with no value set is treated as absent: num_bits falls back to 8, as in TF.
    from qconvert.cli import main

    g = _graph()
    _node(g, "dw1/fq").attr["num_bits"].Clear()
    pb = tmp_path / "bug.pb"
    pb.write_bytes(g.SerializeToString())
    assert main([str(pb), *RANGE, "-o", str(tmp_path / "out.tflite")]) == 0
