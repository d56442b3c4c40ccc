"""``qconvert check``: per-target verdicts, static and with the real tools.

Static verdicts are checked on files with a known property (int8, INT4, blockwise, int16,
per-channel INT4 FULLY_CONNECTED) and on hand-made reader dataclasses, one per rule kind. The
real runs (TFLite Micro against LiteRT REF, Vela's placement, Vela's INT4 crash, the arena
search) skip with a reason when the tool is not installed; CI installs both (the ``test``
extra). Converted models are built once per module.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qconvert.cli import main
from qconvert.schema.reader import ModelInfo, OpInfo, SubgraphInfo, TensorInfo
from qconvert.tools import check as C
from qconvert.tools import targets as T

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "models" / "example_qat.pb"
VERSIONS = C.tool_versions()
needs_tflm = pytest.mark.skipif(VERSIONS["tflm"] is None, reason="tflite-micro is not installed (pip install "
                                "'qconvert[tflm]')")
needs_vela = pytest.mark.skipif(VERSIONS["vela"] is None, reason="ethos-u-vela is not installed (pip install "
                                "'qconvert[vela]')")


# ---------------------------------------------------------------------------
# Files (cached per module)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> "Files":
    return Files(tmp_path_factory.mktemp("check"))


class Files:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _write(self, name: str, data: bytes) -> str:
        path = self.root / f"{name}.tflite"
        if not path.exists():
            path.write_bytes(data)
        return str(path)

    @functools.cached_property
    def example(self) -> str:
        """models/example_qat.pb as qconvert writes it: int8, CONV_2D, DEPTHWISE, FULLY_CONNECTED (no TF)."""
        out = self.root / "example.tflite"
        assert main([str(EXAMPLE), "--inputs-range", "input=-1,1", "-o", str(out)]) == 0
        return str(out)

    def corpus(self, name: str) -> str:
        pytest.importorskip("tensorflow", reason="the corpus graphs are built with TensorFlow")
        import corpus

        from qconvert.api import convert_bytes

        m = corpus.build_model(name)
        return self._write(name, convert_bytes(m.graph_def, input_ranges=dict(m.input_ranges),
                                         input_shapes={k: list(v) for k, v in m.shapes.items()},
                                         inputs=list(m.inputs), outputs=list(m.outputs)))

    @functools.cached_property
    def int4(self) -> str:
        """4-bit QAT weights, stored INT4 as TensorFlow does (per-channel CONV_2D, DEPTHWISE v7, per-tensor FC)."""
        pytest.importorskip("tensorflow", reason="the corpus graphs are built with TensorFlow")
        import corpus

        from qconvert.api import convert_graph

        seed, fn = corpus._BUILDERS["small_classifier"]
        m = corpus.build_qat_graph("small_classifier", seed, fn, weight_bits=4)
        return self._write("int4", convert_graph(m.graph_def, m.input_ranges, m.shapes, m.inputs, m.outputs).model)

    def _float_twin(self, **kw: str) -> bytes:
        pytest.importorskip("tensorflow", reason="the corpus graphs are built with TensorFlow")
        import corpus

        from qconvert.api import convert_graph

        m = corpus.build_float_graph("small_classifier")
        rng = np.random.default_rng(0)
        samples = {k: rng.uniform(*m.input_ranges[k], size=[16, *m.shapes[k][1:]]).astype(np.float32)
                   for k in m.inputs}
        return convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, calibration_data=samples, **kw).model

    @functools.cached_property
    def int16(self) -> str:
        return self._write("int16", self._float_twin(activations="int16"))

    @functools.cached_property
    def int4_per_channel_fc(self) -> str:
        """Post-training INT4 weights: per-channel on FULLY_CONNECTED too."""
        return self._write("int4pc", self._float_twin(weights="int4"))

    @functools.cached_property
    def blockwise(self) -> str:
        tf = pytest.importorskip("tensorflow", reason="the graph is built with TensorFlow")
        from qconvert.api import convert_graph

        rng = np.random.default_rng(0)
        g = tf.Graph()
        with g.as_default():
            y = tf.compat.v1.placeholder(tf.float32, [1, 64], name="input")
            for k, (i, o) in enumerate(((64, 32), (32, 8))):
                w = rng.normal(0, np.sqrt(2.0 / i), [i, o]).astype(np.float32)
                y = tf.matmul(y, tf.constant(w))
                y = tf.nn.relu(y) if k == 0 else y
            tf.identity(y, name="output")
        return self._write("blockwise", convert_graph(g.as_graph_def().SerializeToString(), weights="int4",
                                                      block_size=32).model)


def _doc(path: str, *targets: str, static: bool = True, n: int = 4) -> dict:
    return C.check_model(path, C.parse_targets(targets), n_inputs=n, static_only=static)


def _entry(doc: dict, target: str) -> dict:
    (e,) = [e for e in doc["targets"] if e["target"] == target]
    return e


# ---------------------------------------------------------------------------
# Static verdicts on real files


def test_static_int8_file_runs_everywhere(files: Files) -> None:
    doc = _doc(files.example, "all")
    assert [e["target"] for e in doc["targets"]] == list(T.TARGETS)
    assert {e["verdict"] for e in doc["targets"]} == {"runs"}, [e["summary"] for e in doc["targets"]]
    assert {e["basis"] for e in doc["targets"]} == {"static"} and doc["ok"]
    assert all("--static" in e["notes"][0] for e in doc["targets"])


def test_static_int4_file_ethos_u_cannot_run_and_names_the_tensor(files: Files) -> None:
    doc = _doc(files.int4, "all")
    int4 = {t.name for t in _tensors(files.int4) if t.dtype == "int4"}
    assert len(int4) == 4
    for target in T.ETHOS_U:
        e = _entry(doc, target)
        assert e["verdict"] == "cannot-run"
        crash = [p for p in e["problems"] if p["rule"] == "int4"]
        assert {p["tensor"] for p in crash} == int4 and all(p["effect"] == "fails" for p in crash)
        assert "--int4-storage int8" in crash[0]["fix"] and "5.2" in crash[0]["source"]
    ref = _entry(doc, "litert-ref")  # DEPTHWISE_CONV_2D v7: not in LiteRT 2.3's reference resolver
    assert ref["verdict"] == "cannot-run"
    assert [(p["op"], p["rule"]) for p in ref["problems"]] == [("DEPTHWISE_CONV_2D", "op-version")]
    assert _entry(doc, "litert")["verdict"] == "runs"
    assert _entry(doc, "tflm")["verdict"] == "runs"  # per-tensor INT4 FULLY_CONNECTED is fine there
    assert not doc["ok"]


def test_static_blockwise_file(files: Files) -> None:
    doc = _doc(files.blockwise, "all")
    assert _entry(doc, "litert")["verdict"] == "runs"
    ref, tflm = _entry(doc, "litert-ref"), _entry(doc, "tflm")
    assert ref["verdict"] == tflm["verdict"] == "cannot-run"
    assert {p["effect"] for p in ref["problems"]} == {"wrong"}  # zeros, silently
    assert {p["rule"] for p in tflm["problems"]} >= {"blockwise"}
    assert [p["op_index"] for p in tflm["problems"] if p["rule"] == "blockwise"] == [0, 1]


def test_static_int16_file_runs_everywhere(files: Files) -> None:
    doc = _doc(files.int16, "all")
    assert {t.dtype for t in _tensors(files.int16) if t.data is None} == {"int16"}
    assert {e["target"]: e["verdict"] for e in doc["targets"]} == dict.fromkeys(T.TARGETS, "runs")


def test_static_per_channel_int4_fc_fails_in_tflm_only_there_among_cpus(files: Files) -> None:
    doc = _doc(files.int4_per_channel_fc, "tflm", "litert-ref")
    (p,) = _entry(doc, "tflm")["problems"]
    fc = [k for k, o in enumerate(_model(files.int4_per_channel_fc).operators) if o.builtin == "FULLY_CONNECTED"]
    assert (p["rule"], p["op_index"], p["op"]) == ("fc-int4-per-channel", fc[0], "FULLY_CONNECTED")
    assert p["tensor"] and p["tensor"] in p["message"]
    assert _entry(doc, "litert-ref")["verdict"] == "runs"


# ---------------------------------------------------------------------------
# Static rules on hand-made models (no TensorFlow, no tool)


def _t(name: str, dtype: str = "int8", shape: tuple[int, ...] = (1, 4), data: bytes | None = None,
       scale: tuple[float, ...] = (0.1,), qdim: int = 0, blockwise: tuple[int, int, int] | None = None) -> TensorInfo:
    return TensorInfo(name, dtype, shape, 0, data, scale, (0,) * len(scale), qdim, blockwise)


def _m(tensors: list[TensorInfo], ops: list[OpInfo]) -> ModelInfo:
    return ModelInfo(3, "", [], [SubgraphInfo("main", tensors, ops, [0], [len(tensors) - 1])], {})


def _rules(model: ModelInfo, target: str) -> list[tuple[str, str, int | None]]:
    return [(f.rule, f.effect, f.op_index) for f in T.static_check(model, target)]


def test_rule_op_sets_and_versions() -> None:
    m = _m([_t("x"), _t("y")], [OpInfo("GELU", 1, [0], [1]), OpInfo("FLOOR", 1, [0], [1]),
                                OpInfo("ADD", 6, [0, 0], [1])])
    assert _rules(m, "tflm") == [("op-set", "fails", 0)]  # GELU: not registered in TFLite Micro
    assert _rules(m, "litert-ref") == [("op-version", "fails", 2)]  # ADD v6: REF registers up to v5
    assert _rules(m, "litert") == []
    assert _rules(m, "ethos-u55-128") == [("op-set", "cpu", 1)]  # FLOOR stays on the CPU
    assert T.verdict(T.static_check(m, "ethos-u55-128")) == "partial"


def test_rule_vela_weight_sum_stride_bias_float_per_axis() -> None:
    big = np.full((2, 3, 3, 8), 127, np.int8)  # 72 × 127 = 9144 per channel: fine
    w_ok = _t("w", shape=big.shape, data=big.tobytes(), scale=(0.1, 0.1), qdim=0)
    # 258 · 256 · 127 = 8388096 per channel, over Vela's 8323072
    w_dw = _t("wd", shape=(1, 258, 256, 2), data=np.full((1, 258, 256, 2), 127, np.int8).tobytes())
    bias64 = _t("b", "int64", (2,), np.array([1 << 41, 0], np.int64).tobytes())
    m = _m([_t("x", shape=(1, 8, 8, 8)), w_ok, bias64, w_dw, _t("f", "float32", (1, 4)),
            _t("y", shape=(1, 8, 8, 2), scale=(0.1, 0.2), qdim=3)],
           [OpInfo("CONV_2D", 3, [0, 1, 2], [5], {"stride_h": 1, "stride_w": 1}),
            OpInfo("DEPTHWISE_CONV_2D", 3, [0, 3], [5], {"stride_h": 4, "stride_w": 1}),
            OpInfo("RELU", 1, [4], [4]),
            OpInfo("ADD", 1, [5, 5], [5])])
    rules = _rules(m, "ethos-u55-128")
    assert ("bias", "cpu", 0) in rules  # INT64 bias 2^41 over 1099511627775
    assert ("weight-sum", "cpu", 1) in rules and ("weight-sum", "cpu", 0) not in rules  # 258·256·127 > 8323072
    assert ("stride", "cpu", 1) in rules  # stride 4 on DEPTHWISE_CONV_2D
    assert ("float", "cpu", 2) in rules  # a float32 feature map
    assert ("per-axis", "cpu", 3) in rules and ("per-axis", "cpu", 0) not in rules
    assert ("bias", "cpu", 0) not in _rules(m, "ethos-u85-256")  # U85's limit is 2^48 - 1
    assert ("stride", "cpu", 1) not in _rules(m, "ethos-u85-256")


def test_rule_vela_int16_batch_matmul_stays_on_the_cpu_of_u55_u65() -> None:
    m16 = _m([_t("a", "int16", (1, 2, 4, 8)), _t("b", "int16", (1, 2, 8, 5)), _t("y", "int16", (1, 2, 4, 5))],
             [OpInfo("BATCH_MATMUL", 2, [0, 1], [2])])
    m8 = _m([_t("a", "int8", (1, 2, 4, 8)), _t("b", "int8", (1, 2, 8, 5)), _t("y", "int8", (1, 2, 4, 5))],
            [OpInfo("BATCH_MATMUL", 2, [0, 1], [2])])
    for target in ("ethos-u55-128", "ethos-u55-256", "ethos-u65-256"):
        assert _rules(m16, target) == [("matmul-int16", "cpu", 0)]
        assert _rules(m8, target) == []
    assert _rules(m16, "ethos-u85-256") == _rules(m16, "tflm") == []


def test_rule_tflm_hybrid_and_16x4() -> None:
    w4 = _t("w", "int4", (4, 4), bytes(8))
    m = _m([_t("x", "int16"), w4, _t("f", "float32"), _t("w8", "int8", (4, 4), bytes(16)), _t("y", "int16")],
           [OpInfo("FULLY_CONNECTED", 11, [0, 1], [4]), OpInfo("CONV_2D", 3, [2, 3], [2])])
    assert _rules(m, "tflm") == [("int16-int4", "fails", 0), ("hybrid", "fails", 1)]


def test_every_rule_is_complete_data() -> None:
    seen = set()
    for r in T.RULES:
        assert r.targets and set(r.targets) <= set(T.TARGETS), r
        assert r.check in T.CHECKS and r.effect in T.EFFECTS and r.constraint and r.source, r
        for t in r.targets:
            assert (t, r.rule) not in seen, f"two rows for ({t}, {r.rule})"
            seen.add((t, r.rule))
    assert {t for t, _ in seen} == set(T.TARGETS)


def test_without_the_tools_the_verdict_is_static_and_says_what_to_install(
        files: Files, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "tool_versions", lambda: {"litert": VERSIONS["litert"], "tflm": None, "vela": None})
    doc = C.check_model(files.int4, ["tflm", "ethos-u65-256"], n_inputs=1)
    tflm, npu = doc["targets"]
    assert tflm["basis"] == npu["basis"] == "static" and tflm["tool"] is None
    assert "pip install 'qconvert[tflm]'" in tflm["notes"][0] and "qconvert[vela]" in npu["notes"][0]
    assert (tflm["verdict"], npu["verdict"]) == ("runs", "cannot-run") and not doc["ok"]


# ---------------------------------------------------------------------------
# Real runs


@needs_tflm
def test_tflm_equals_litert_ref_without_fully_connected(files: Files) -> None:
    path = files.corpus("conv_relu_perchannel")
    assert "FULLY_CONNECTED" not in {o.builtin for o in _model(path).operators}
    e = _entry(_doc(path, "tflm", static=False, n=8), "tflm")
    assert (e["verdict"], e["basis"]) == ("runs", "tool")
    cost = e["cost"]
    assert cost["reference"] == "litert-ref" and cost["exact"] is True
    assert sum(o["elements"] for o in cost["outputs"]) == 8 * 7 * 7 * 4 and cost["outputs"][0]["unit"] == "LSB"


@needs_tflm
def test_tflm_arena_is_the_smallest_that_works(files: Files) -> None:
    e = _entry(_doc(files.example, "tflm", static=False, n=2), "tflm")
    arena = e["cost"]["arena_bytes"]
    assert arena and e["cost"]["arena_recorded_bytes"]
    data = Path(files.example).read_bytes()
    assert C._arena_works(data, arena) and not C._arena_works(data, arena - C.ARENA_STEP)
    assert not C._arena_works(data, 64)  # far too small: the forked child fails (or crashes), not this process


@needs_tflm
def test_tflm_with_fully_connected_reports_differences_without_failing(files: Files) -> None:
    """TFLite Micro's FULLY_CONNECTED rescales with a 32-bit multiplier, LiteRT 2.3's REF in
    double precision: a few outputs may be 1-2 LSB apart. Reported, not a failure."""
    e = _entry(_doc(files.corpus("small_classifier"), "tflm", static=False, n=32), "tflm")
    assert e["verdict"] == "runs"
    (out,) = e["cost"]["outputs"]
    print("small_classifier tflm vs litert-ref:", out["differing"], "of", out["elements"], "max", out["max_diff"])
    assert out["max_diff"] <= 2 and out["fraction"] < 0.1


@needs_tflm
def test_tflm_real_run_rejects_per_channel_int4_fc_and_names_the_op(files: Files) -> None:
    path = files.int4_per_channel_fc
    e = _entry(_doc(path, "tflm", static=False), "tflm")
    assert (e["verdict"], e["basis"]) == ("cannot-run", "tool")
    (p,) = e["problems"]
    fc = [k for k, o in enumerate(_model(path).operators) if o.builtin == "FULLY_CONNECTED"][0]
    assert p["op_index"] == fc and p["explained_by"] == ["fc-int4-per-channel"]
    assert "FULLY_CONNECTED" in e["summary"]


@needs_vela
def test_vela_places_a_simple_conv_model_on_the_npu(files: Files) -> None:
    e = _entry(_doc(files.example, "ethos-u55-128", static=False), "ethos-u55-128")
    assert (e["verdict"], e["basis"]) == ("runs", "tool"), e["summary"]
    c = e["cost"]
    assert c["cpu_ops"] == 0 and c["npu_ops"] == len(_model(files.example).operators) == len(c["ops"])
    assert c["vela_cpu_operators"] == 0 and c["vela_npu_operators"] > 0
    assert c["sram_bytes"] > 0 and c["off_chip_flash_bytes"] > 0 and c["inference_seconds"] > 0
    assert c["system_config"] == "Ethos_U55_High_End_Embedded" and c["memory_mode"] == "Shared_Sram"


@needs_vela
def test_vela_crash_on_int4_is_a_verdict(files: Files) -> None:
    e = _entry(_doc(files.int4, "ethos-u55-128", static=False), "ethos-u55-128")
    assert (e["verdict"], e["basis"]) == ("cannot-run", "tool")
    (p,) = e["problems"]
    assert "crashed" in p["message"] and p["explained_by"] == ["int4"] and p["tensor"]


# ---------------------------------------------------------------------------
# Command line: exit codes, JSON shape, one-line errors


def test_exit_codes_and_json_shape(files: Files, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", files.example, "--static", "--target", "tflm", "--target", "ethos-u55-128", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"schema_version", "file", "inputs", "ok", "targets"} and doc["schema_version"] == 1
    assert [e["target"] for e in doc["targets"]] == ["tflm", "ethos-u55-128"]
    for e in doc["targets"]:
        assert set(e) == {"target", "description", "verdict", "basis", "tool", "summary", "problems", "static", "cost",
                          "notes"}
        assert set(e["static"]) == {"verdict", "problems"}
    assert main(["check", files.example, "--target", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown target 'nope'" in err and "ethos-u85-256" in err
    assert main(["check", files.example, "--inputs", "0"]) == 2
    capsys.readouterr()


def test_cannot_run_exits_1_and_still_prints_the_report(files: Files, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", files.int4, "--static", "--target", "ethos-u55-128"]) == 1
    out = capsys.readouterr().out
    assert "cannot run" in out and "INT4" in out and "--int4-storage int8" in out


@pytest.mark.parametrize("content", [b"", b"garbage, not a model", b"\x18\x00\x00\x00TFL3" + b"\x00" * 8])
def test_a_damaged_file_is_one_line_exit_1(tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.tflite"
    path.write_bytes(content)
    assert main(["check", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "bad.tflite" in captured.err


def test_truncated_real_file_is_one_line(files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cut.tflite"
    path.write_bytes(Path(files.example).read_bytes()[:500])
    assert main(["check", str(path)]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_static_check_imports_no_tool_and_no_converter(files: Files) -> None:
    code = ("import sys, io, contextlib; from qconvert.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): code = main(sys.argv[1:])\n"
            "print(code, ' '.join(sorted(sys.modules)))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code, "check", files.example, "--static"], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    status, modules = proc.stdout.split(" ", 1)
    assert status == "0", proc.stderr
    loaded = set(modules.split())
    for prefix in ("tflite_micro", "ethosu", "tensorflow", "qconvert.converter", "ai_edge_litert.interpreter"):
        assert not any(m == prefix or m.startswith(prefix + ".") for m in loaded), prefix


# ---------------------------------------------------------------------------


def _model(path: str) -> ModelInfo:
    from qconvert.schema.reader import read_model

    return read_model(Path(path).read_bytes())


def _tensors(path: str) -> list[TensorInfo]:
    return _model(path).tensors


# ---------------------------------------------------------------------------
# convert --target and the batch manifest's target key


@pytest.fixture(scope="module")
def four_bit_pb(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A QAT graph with 4-bit weight FakeQuants (TensorFlow writes INT4 tensors for them)."""
    pytest.importorskip("tensorflow", reason="the corpus is built with TensorFlow")
    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    import corpus

    seed, fn = corpus._BUILDERS["conv_relu_perchannel"]
    m = corpus.build_qat_graph("conv_relu_perchannel", seed, fn, weight_bits=4)
    path = tmp_path_factory.mktemp("target") / "four_bit.pb"
    path.write_bytes(m.graph_def)
    (name, (lo, hi)), = m.input_ranges.items()
    return path, f"{name}={lo},{hi}"


def _qconvert(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qconvert", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def test_convert_for_ethos_u_stores_4bit_weights_as_int8(four_bit_pb: tuple[Path, str], tmp_path: Path) -> None:
    from qconvert.schema.reader import read_model

    pb, rng = four_bit_pb
    out = tmp_path / "u55.tflite"
    r = _qconvert("convert", str(pb), "--inputs-range", rng, "-o", str(out), "--target", "ethos-u55-128",
                  "--report", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    assert "--target ethos-u55-128: 4-bit weights stored as int8" in r.stderr and "ethos-u55-128: runs" in r.stdout
    assert "int4" not in {t.dtype for t in read_model(out.read_bytes()).tensors}
    record = json.loads((tmp_path / "r.json").read_text())["models"][0]
    assert record["target_check"]["ok"] and record["target_check"]["targets"][0]["target"] == "ethos-u55-128"

    r = _qconvert("convert", str(pb), "--inputs-range", rng, "-o", str(out), "--target", "ethos-u55-128",
                  "--int4-storage", "packed")  # the user's choice wins, and the check says what follows
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith("qconvert: error: wrote")
    assert "ethos-u55-128 cannot run it" in r.stderr and out.is_file()
    r = _qconvert("convert", str(pb), "--inputs-range", rng, "-o", str(out), "--target", "litert")
    assert r.returncode == 0 and "int4" in {t.dtype for t in read_model(out.read_bytes()).tensors}, r.stderr


def test_convert_target_usage_errors(four_bit_pb: tuple[Path, str], tmp_path: Path) -> None:
    pb, rng = four_bit_pb
    r = _qconvert("convert", str(pb), "--inputs-range", rng, "-o", str(tmp_path / "x.tflite"), "--target", "npu9")
    assert r.returncode == 2 and "unknown target 'npu9'" in r.stderr
    r = _qconvert("convert", str(pb), "--calibration-data", str(tmp_path / "none.npz"), "--weights", "int4",
                  "--block-size", "32", "--target", "tflm", "-o", str(tmp_path / "x.tflite"))
    assert r.returncode == 2 and "blockwise INT4 weights run only in LiteRT's XNNPACK" in r.stderr


def test_batch_manifest_target(four_bit_pb: tuple[Path, str], tmp_path: Path) -> None:
    pb, rng = four_bit_pb
    name, lo_hi = rng.split("=")
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[defaults]\ntarget = "tflm"\ninputs_range = {{ {name} = "{lo_hi}" }}\n'
                        f'[[model]]\npath = "{pb}"\noutput = "{tmp_path / "a.tflite"}"\n')
    r = _qconvert("batch", "--manifest", str(manifest), "--jobs", "1", "--report", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr
    record = json.loads((tmp_path / "r.json").read_text())["models"][0]
    assert record["status"] == "ok" and record["target_check"]["targets"][0]["target"] == "tflm"
    assert any("stored as int8" in n for n in record["notes"])
    manifest.write_text(manifest.read_text().replace('target = "tflm"', 'target = ["tflm", "ethos-u55-128"]\n'
                                                     'int4_storage = "packed"'))
    r = _qconvert("batch", "--manifest", str(manifest), "--jobs", "1", "--report", str(tmp_path / "r.json"))
    record = json.loads((tmp_path / "r.json").read_text())["models"][0]
    assert r.returncode == 1 and record["status"] == "failed" and "ethos-u55-128 cannot run it" in record["error"]
    manifest.write_text('[defaults]\ntarget = "npu9"\n')  # a usage error naming where
    r = _qconvert("batch", str(pb), "--manifest", str(manifest))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "[defaults]: target = 'npu9': unknown target 'npu9'" in r.stderr


def test_vela_leaves_gather_to_the_cpu_with_its_reason(tmp_path: Path) -> None:
    """An int8 GATHER: Vela 5.2 keeps it on the CPU ("Unsupported opType"): the verdict is partial,
    the op and Vela's reason are named, and --fail-on-cpu turns it into exit 1."""
    pytest.importorskip("ethosu.vela", reason="Vela is the oracle")
    tf = pytest.importorskip("tensorflow", reason="the model is built with TensorFlow")
    from qconvert.api import convert_graph

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 8, 8, 4), name="input")
        tf.identity(tf.gather(x, [3, 1, 2, 0], axis=3), name="output")
    samples = {"input": np.random.default_rng(0).uniform(-1, 1, (4, 8, 8, 4)).astype(np.float32)}
    path = tmp_path / "gather.tflite"
    path.write_bytes(convert_graph(g.as_graph_def().SerializeToString(), inputs=["input"], outputs=["output"],
                                   calibration_data=samples).model)
    entry = C.check_model(str(path), ["ethos-u55-128"], n_inputs=1)["targets"][0]
    assert entry["verdict"] == "partial" and entry["basis"] == "tool"
    cpu = [op for op in entry["cost"]["ops"] if op["placement"] == "cpu"]
    assert [op["op"] for op in cpu] == ["GATHER"] and "Unsupported" in cpu[0]["reason"]
    for extra, code in (([], 0), (["--fail-on-cpu"], 1)):
        r = subprocess.run([sys.executable, "-m", "qconvert", "check", str(path), "--target", "ethos-u55-128", *extra],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert r.returncode == code, (extra, r.stdout, r.stderr)


def test_targets_from_python(four_bit_pb: tuple[Path, str], tmp_path: Path) -> None:
    """``qconvert.convert(..., target=...)`` does what ``convert --target`` does: the target's
    choices (4-bit weights as int8 for Vela), the check of the written file in the record, and,
    when a target cannot run the file, TargetError after writing it, the failed record attached."""
    import qconvert
    from qconvert.schema.reader import read_model

    pb, rng = four_bit_pb
    out = tmp_path / "u55.tflite"
    result = qconvert.convert(pb, out, inputs_range=rng, target="ethos-u55-128")
    assert "int4" not in {t.dtype for t in read_model(out.read_bytes()).tensors}
    assert any("4-bit weights stored as int8" in n for n in result.notes)
    assert result.record["status"] == "ok" and result.record["target_check"]["ok"]
    assert result.target_check["targets"][0]["target"] == "ethos-u55-128"

    packed = tmp_path / "packed.tflite"
    with pytest.raises(qconvert.TargetError, match="ethos-u55-128 cannot run it") as info:
        qconvert.convert(pb, packed, qconvert.ConvertOptions.of(inputs_range=rng, int4_storage="packed"),
                         target=["ethos-u55-128"])
    assert packed.is_file() and info.value.result.record["status"] == "failed"
    assert "int4" in {t.dtype for t in read_model(packed.read_bytes()).tensors}
