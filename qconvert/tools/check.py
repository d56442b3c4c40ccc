"""``qconvert check``: will a .tflite file run on a target, why not, and what it costs there.

Targets (``qconvert.tools.targets.TARGETS``): ``litert`` (LiteRT's default kernels: the builtin
ops and the XNNPACK delegate), ``litert-ref`` (its reference kernels), ``tflm`` (TensorFlow Lite
Micro), ``ethos-u55-128``, ``ethos-u55-256``, ``ethos-u65-256``, ``ethos-u85-256`` (Arm's NPUs,
through the Vela compiler); ``all`` for every one.

Each target is checked two ways:

* **static**: the file against the known constraints of the target (``targets.RULES``: one row
  per target and rule, each with its source). Always done; it is the verdict when the tool is
  absent (``pip install 'qconvert[tflm]'`` / ``'qconvert[vela]'``) or with ``--static``.
* **tool**: the real thing. LiteRT (always installed) and TFLite Micro run the file on
  ``--inputs`` random inputs (fixed ``--seed``), each in a child process, so that a crash in a
  runtime is a verdict and not the end of the command; TFLite Micro's outputs are compared with
  LiteRT's reference kernels on the same inputs, and the smallest tensor arena that works is
  searched for (TFLite Micro's recorded figure first, then halving and bisection to 16 bytes,
  each try in a forked process). Vela compiles the file in a temporary directory with its
  default system configuration and memory mode for the accelerator (or ``--vela-config`` and
  ``--vela-arg``), and its report gives the operators on NPU and CPU (with its reason for each
  CPU one), SRAM, DRAM and flash use, and the estimated inference time. A Vela crash (Vela 5.2
  crashes on any INT4 tensor) is the verdict "cannot-run", with the reason.

  The tool's verdict wins; static findings a run cannot reveal (LiteRT's reference kernels read
  blockwise weights as zeros, silently) still count.

Verdicts: ``runs``; ``partial`` (Ethos-U: some operators stay on the CPU, where TFLite Micro runs
them beside the NPU); ``cannot-run``. Exit 0 when no requested target is ``cannot-run`` (with
``--fail-on-cpu``: and none is ``partial``), 1 otherwise; 2 for usage errors.

JSON shape (``--json``), schema_version 1. Keys are stable; new keys may be added::

    {
      "schema_version": 1,
      "file": {"name": str, "bytes": int, "operators": int},
      "inputs": {"count": int, "seed": int},
      "ok": bool,                          # the exit status is 0
      "targets": [
        {"target": str, "description": str,
         "verdict": "runs" | "partial" | "cannot-run",
         "basis": "tool" | "static",
         "tool": null | {"name": str, "version": str, "seconds": float},
         "summary": str,                  # the line the text output shows
         "problems": [finding],           # what decided the verdict
         "static": {"verdict": str, "problems": [finding]},   # the static check, always
         "cost": null | cost,             # by kind of target, below
         "notes": [str]}
      ]
    }
    finding = {"rule": str, "effect": "fails" | "wrong" | "cpu", "subgraph": int,
               "op_index": int | null, "op": str | null, "tensor": str | null,
               "message": str, "fix": str | null, "source": str,
               "explained_by": [str]}     # tool findings only: static rules on the same op
    cost, litert / litert-ref = {"seconds_per_inference": float,
               "reference": null | "litert-ref", "exact": bool | null, "outputs": [output]}
    cost, tflm = {"arena_bytes": int | null,          # smallest arena that works (16-byte steps)
               "arena_recorded_bytes": int | null,  # TFLite Micro's RecordingMicroAllocator total
               "seconds_per_inference": float,
               "reference": "litert-ref" | "litert" | null, "exact": bool | null, "outputs": [output]}
    output = {"index": int, "name": str, "dtype": str, "shape": [int], "elements": int,
              "differing": int, "fraction": float, "max_diff": float,
              "unit": "LSB" | "abs"}            # integer outputs differ in LSB
    cost, ethos-u* = {"accelerator": str, "system_config": str, "memory_mode": str,
               "npu_ops": int, "cpu_ops": int,        # the file's operators
               "vela_npu_operators": int, "vela_cpu_operators": int,   # Vela's own count
               "ops": [{"index": int, "op": str, "placement": "npu" | "cpu", "reason": str | null}],
               "sram_bytes": int, "dram_bytes": int, "on_chip_flash_bytes": int, "off_chip_flash_bytes": int,
               "inference_seconds": float, "inferences_per_second": float, "cycles": int, "macs": int}

May import: ``qconvert.schema``, ``qconvert.tools.targets``, ``qconvert.tools.dump`` (loading), ``qconvert.errors``,
numpy; tflite_micro and ethos-u-vela only in the child processes that run them.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qconvert.errors import ConversionError, UsageError
from qconvert.tools import targets as T

SCHEMA_VERSION = 1
DEFAULT_INPUTS = 8
ARENA_STEP = 16  # TFLite Micro aligns its allocations to 16 bytes
WORKER_TIMEOUT = 900.0
VELA_TIMEOUT = 900.0
_VERDICT_TEXT = {"runs": "runs", "partial": "partial", "cannot-run": "cannot run"}


# ---------------------------------------------------------------------------
# Tools


def tool_versions() -> dict[str, str | None]:
    """Installed versions of the tools (None: not installed), without importing them."""
    from importlib import metadata
    from importlib.util import find_spec

    out: dict[str, str | None] = {}
    for key, dist, module in (("litert", "ai-edge-litert", "ai_edge_litert"), ("tflm", "tflite-micro", "tflite_micro"),
                              ("vela", "ethos-u-vela", "ethosu")):
        try:
            out[key] = metadata.version(dist) if find_spec(module) is not None else None
        except (metadata.PackageNotFoundError, ValueError, ImportError):
            out[key] = None
    return out


def parse_targets(names: tuple[str, ...] | list[str]) -> list[str]:
    """The requested targets in TARGETS order; ``all`` for every one; none given = all.
    UsageError naming the valid ones otherwise."""
    wanted = set()
    for name in names:
        for part in name.split(","):
            part = part.strip()
            if not part:
                continue
            if part == "all":
                wanted.update(T.TARGETS)
            elif part in T.TARGETS:
                wanted.add(part)
            else:
                raise UsageError(f"unknown target '{part}'; targets: {', '.join(T.TARGETS)}, all")
    return [t for t in T.TARGETS if t in wanted] or list(T.TARGETS)


# ---------------------------------------------------------------------------
# Child processes: LiteRT and TFLite Micro (a crash there must not end the command)


def _pythonpath_env() -> dict[str, str]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _signal_text(code: int) -> str:
    import signal

    sig = -code if code < 0 else code - 128
    try:
        return f"signal {signal.Signals(sig).name}"
    except ValueError:
        return f"exit status {code}"


_NOISE = re.compile(r"^(Traceback|  File |    |INFO:|WARNING:|W0000|I0000|E0000|RuntimeError: TFLM failed)")


def _stderr_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not _NOISE.match(ln)]


@dataclass
class RunResult:
    ok: bool
    error: str | None = None
    op_index: int | None = None
    outputs: list[np.ndarray] = field(default_factory=list)
    seconds_per_inference: float = 0.0
    arena_bytes: int | None = None
    arena_recorded: int | None = None
    seconds: float = 0.0


def _run_child(runtime: str, model_path: str, inputs_path: str, workdir: str, n_outputs: int,
               arena_search: bool = False) -> RunResult:
    """Run ``runtime`` ("tflm", "ref" or "default") on the saved inputs in a child process."""
    import subprocess

    out_path = os.path.join(workdir, f"out-{runtime}.npz")
    result_path = os.path.join(workdir, f"result-{runtime}.json")
    request = {"runtime": runtime, "model": model_path, "inputs": inputs_path, "outputs": out_path,
               "result": result_path, "n_outputs": n_outputs, "arena_search": arena_search}
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "qconvert.tools.check", "--worker", json.dumps(request)],
                              capture_output=True, text=True, timeout=WORKER_TIMEOUT, env=_pythonpath_env(),
                              check=False)
    except subprocess.TimeoutExpired:
        return RunResult(False, f"no answer after {WORKER_TIMEOUT:.0f} s", seconds=time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    lines = _stderr_lines(done.stderr)
    if not os.path.exists(result_path):
        why = f"crashed ({_signal_text(done.returncode)})" if done.returncode else "stopped without a result"
        return RunResult(False, "; ".join([why, *lines[-3:]]), _node_index(lines), seconds=seconds)
    with open(result_path, encoding="utf-8") as fh:
        res = json.load(fh)
    if not res["ok"]:
        detail = [ln for ln in lines if not ln.startswith("Failed to")] or lines
        text = "; ".join(dict.fromkeys([*detail[-3:], res["error"]]))
        return RunResult(False, text, _node_index(lines), seconds=seconds)
    with np.load(out_path) as z:
        outputs = [z[f"out{k}"] for k in range(n_outputs)]
    return RunResult(True, None, None, outputs, res["seconds_per_inference"], res.get("arena_bytes"),
                     res.get("arena_recorded"), seconds)


def _node_index(lines: list[str]) -> int | None:
    for ln in lines:
        m = re.search(r"Node \S+ \(number (\d+)\)", ln)
        if m:
            return int(m.group(1))
    return None


def _worker(request: dict[str, Any]) -> None:
    """The child: run one runtime on every input sample, write the outputs and a result file."""
    data = open(request["model"], "rb").read()
    with np.load(request["inputs"]) as z:
        feeds = [z[f"in{k}"] for k in range(len(z.files))]
    n = feeds[0].shape[0] if feeds else 1
    result: dict[str, Any] = {"ok": False, "error": None}
    outputs: list[list[np.ndarray]] = [[] for _ in range(request["n_outputs"])]
    try:
        if request["runtime"] == "tflm":
            seconds = _worker_tflm(data, feeds, n, outputs, result, request["arena_search"])
        else:
            seconds = _worker_litert(data, feeds, n, outputs, request["runtime"])
        result.update(ok=True, seconds_per_inference=seconds)
        np.savez(request["outputs"], **{f"out{k}": np.stack(v) for k, v in enumerate(outputs)})
    except Exception as exc:  # noqa: BLE001 - reported to the parent as the runtime's answer
        result["error"] = (str(exc).splitlines() or [type(exc).__name__])[0]
    with open(request["result"], "w", encoding="utf-8") as fh:
        json.dump(result, fh)


def _worker_litert(data: bytes, feeds: list[np.ndarray], n: int, outputs: list[list[np.ndarray]],
                   resolver: str) -> float:
    from qconvert.schema.litert import interpreter

    it = interpreter(data, preserve_all_tensors=False, resolver=resolver)
    ins, outs = it.get_input_details(), it.get_output_details()
    times = []
    for s in range(n):
        for d, x in zip(ins, feeds):
            it.set_tensor(d["index"], x[s])
        t0 = time.perf_counter()
        it.invoke()
        times.append(time.perf_counter() - t0)
        for k, d in enumerate(outs):
            outputs[k].append(np.array(it.get_tensor(d["index"])))
    return float(np.median(times))


def _tflm_recorded(it: Any) -> int | None:
    """TFLite Micro's RecordingMicroAllocator total, which it prints to the C stderr."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            it.print_allocations()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode("utf-8", "replace")
    m = re.search(r"Arena allocation total (\d+) bytes", text)
    return int(m.group(1)) if m else None


def _worker_tflm(data: bytes, feeds: list[np.ndarray], n: int, outputs: list[list[np.ndarray]],
                 result: dict[str, Any], arena_search: bool) -> float:
    from tflite_micro.python.tflite_micro import runtime

    big = 10 * len(data) + (16 << 20)
    it = runtime.Interpreter.from_bytes(data, arena_size=big)
    times = []
    for s in range(n):
        for k, x in enumerate(feeds):
            it.set_input(np.ascontiguousarray(x[s]), k)
        t0 = time.perf_counter()
        it.invoke()
        times.append(time.perf_counter() - t0)
        for k in range(len(outputs)):
            outputs[k].append(np.array(it.get_output(k)))
    recorded = _tflm_recorded(it)
    result["arena_recorded"] = recorded
    if arena_search and hasattr(os, "fork"):
        result["arena_bytes"] = _smallest_arena(data, recorded or big, big)
    return float(np.median(times))


def _arena_works(data: bytes, size: int) -> bool:
    """Whether TFLite Micro allocates the model's tensors in ``size`` bytes (tried in a forked
    process: a too-small arena can crash it)."""
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            import faulthandler

            faulthandler.disable()  # a crash here is the answer "too small", not a report
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            from tflite_micro.python.tflite_micro import runtime

            runtime.Interpreter.from_bytes(data, arena_size=size)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _smallest_arena(data: bytes, hint: int, big: int) -> int | None:
    hi = max(ARENA_STEP, -(-hint // ARENA_STEP) * ARENA_STEP)
    while not _arena_works(data, hi):  # the recorded figure can miss alignment slack
        if hi >= big:
            return None
        hi = min(big, hi * 2)
    lo = hi // 2
    while lo >= ARENA_STEP and _arena_works(data, lo):
        hi, lo = lo, lo // 2
    while hi - lo > ARENA_STEP:  # invariant: hi works, lo does not
        mid = (lo + hi) // 2 // ARENA_STEP * ARENA_STEP
        if mid <= lo:
            break
        if _arena_works(data, mid):
            hi = mid
        else:
            lo = mid
    return hi


# ---------------------------------------------------------------------------
# Vela


@dataclass
class VelaResult:
    ok: bool
    error: str | None = None
    seconds: float = 0.0
    cost: dict[str, Any] = field(default_factory=dict)
    cpu: dict[int, str | None] = field(default_factory=dict)  # file op index → Vela's reason


_WARNING = re.compile(r"^Warning \(supported operators\) operator: (\S+), ofm: '(.*)'$")


def _vela_reasons(stdout: str) -> dict[str, str]:
    """{ofm name: reason} from Vela's "Warning (supported operators)" blocks."""
    out: dict[str, str] = {}
    lines = stdout.splitlines()
    for k, ln in enumerate(lines):
        m = _WARNING.match(ln.strip())
        if not m:
            continue
        reason = []
        for follow in lines[k + 1:]:
            if not follow.strip():
                break
            reason.append(follow.strip().removeprefix("Reason: "))
        out.setdefault(m.group(2), " ".join(reason) or f"{m.group(1)} not supported")
    return out


def _vela_value(stdout: str, label: str) -> str | None:
    m = re.search(rf"^{re.escape(label)}\s+(.+?)\s*$", stdout, re.M)
    return m.group(1) if m else None


def run_vela(model_path: str, model: Any, accelerator: str, vela_config: str | None = None,
             vela_args: tuple[str, ...] = ()) -> VelaResult:
    """Compile with Vela in a temporary directory and read its report."""
    import csv
    import glob
    import subprocess
    import tempfile

    from qconvert.schema.reader import read_model

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qconvert-vela-") as out:
        cmd = [sys.executable, "-c", "import sys; from ethosu.vela.vela import main; sys.argv[0] = 'vela'; "
               "sys.exit(main())", os.path.abspath(model_path), "--accelerator-config", accelerator,
               "--output-dir", out, "--show-cpu-operations"]
        if vela_config:
            cmd += ["--config", vela_config]
        cmd += list(vela_args)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=VELA_TIMEOUT, cwd=out, check=False)
        except subprocess.TimeoutExpired:
            return VelaResult(False, f"Vela gave no answer after {VELA_TIMEOUT:.0f} s", time.perf_counter() - t0)
        seconds = time.perf_counter() - t0
        text = done.stdout + "\n" + done.stderr
        if done.returncode:
            lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Warning: No ")
                     and not ln.startswith(("Traceback", "  File "))]
            crashed = done.returncode < 0 or done.returncode > 128
            why = f"crashed ({_signal_text(done.returncode)})" if crashed else f"failed (exit status {done.returncode})"
            return VelaResult(False, f"Vela {why}" + (f": {lines[-1]}" if lines else ""), seconds)
        stem = os.path.splitext(os.path.basename(model_path))[0]
        summary: dict[str, str] = {}
        for path in glob.glob(os.path.join(out, f"{glob.escape(stem)}_summary_*.csv")):
            with open(path, newline="", encoding="utf-8") as fh:
                summary = next(csv.DictReader(fh), {}) or {}
        cpu_names: set[str] = set()
        compiled = os.path.join(out, f"{stem}_vela.tflite")
        if os.path.exists(compiled):
            vm = read_model(open(compiled, "rb").read())
            for sg in vm.subgraphs:
                for op in sg.operators:
                    if op.custom_code != "ethos-u":
                        cpu_names.update(sg.tensors[i].name for i in op.outputs)
    reasons = _vela_reasons(done.stdout)
    ops, cpu = [], {}
    sg0 = model.subgraphs[0]
    for k, op in enumerate(sg0.operators):
        names = [sg0.tensors[i].name for i in op.outputs]
        on_cpu = any(n in cpu_names for n in names)
        reason = next((reasons[n] for n in names if n in reasons), None)
        if on_cpu:
            cpu[k] = reason
        ops.append({"index": k, "op": op.builtin, "placement": "cpu" if on_cpu else "npu",
                    "reason": reason if on_cpu else None})

    def num(key: str, scale: float = 1.0) -> float:
        try:
            return float(summary.get(key, "nan")) * scale
        except ValueError:
            return float("nan")

    def count(label: str) -> int:
        m = re.search(rf"^{label} operators = (\d+)", done.stdout, re.M)
        return int(m.group(1)) if m else 0

    kib = lambda key: int(round(num(key, 1024.0))) if np.isfinite(num(key)) else 0  # noqa: E731
    cost = {"accelerator": accelerator,
            "system_config": summary.get("system_config") or _vela_value(done.stdout, "System configuration"),
            "memory_mode": summary.get("memory_mode") or _vela_value(done.stdout, "Memory mode"),
            "npu_ops": len(ops) - len(cpu), "cpu_ops": len(cpu),
            "vela_npu_operators": count("NPU"), "vela_cpu_operators": count("CPU"), "ops": ops,
            "sram_bytes": kib("sram_memory_used"), "dram_bytes": kib("dram_memory_used"),
            "on_chip_flash_bytes": kib("on_chip_flash_memory_used"),
            "off_chip_flash_bytes": kib("off_chip_flash_memory_used"),
            "inference_seconds": num("inference_time"), "inferences_per_second": num("inferences_per_second"),
            "cycles": int(num("cycles_total")) if np.isfinite(num("cycles_total")) else 0,
            "macs": int(num("nn_macs")) if np.isfinite(num("nn_macs")) else 0}
    return VelaResult(True, None, seconds, cost, cpu)


# ---------------------------------------------------------------------------
# The check


def random_inputs(model: Any, n: int, seed: int) -> list[np.ndarray]:
    """``n`` samples for each model input: integers over the type's whole range, floats in [-1, 1]."""
    rng = np.random.default_rng(seed)
    sg = model.subgraphs[0]
    out = []
    for i in sg.inputs:
        t = sg.tensors[i]
        shape = [n, *[d if d > 0 else 1 for d in t.shape]]
        dtype = np.dtype("int8" if t.dtype == "int4" else t.dtype) if t.dtype != "string" else None
        if dtype is None:
            raise ConversionError(f"input '{t.name}' is a string tensor: check cannot make inputs for it")
        if dtype == np.bool_:
            out.append(rng.integers(0, 2, shape).astype(np.bool_))
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            lo, hi = (info.min, info.max) if dtype.itemsize <= 2 else (0, 9)
            out.append(rng.integers(lo, hi, shape, endpoint=True, dtype=np.int64).astype(dtype))
        else:
            out.append(rng.uniform(-1, 1, shape).astype(dtype))
    return out


def compare_outputs(model: Any, got: list[np.ndarray], ref: list[np.ndarray]) -> list[dict[str, Any]]:
    sg = model.subgraphs[0]
    rows = []
    for k, (a, b) in enumerate(zip(got, ref)):
        t = sg.tensors[sg.outputs[k]]
        integer = a.dtype.kind in "iub"
        if a.shape != b.shape:
            rows.append({"index": k, "name": t.name, "dtype": str(a.dtype), "shape": list(a.shape[1:]),
                         "elements": int(a.size), "differing": int(a.size), "fraction": 1.0,
                         "max_diff": float("inf"), "unit": "LSB" if integer else "abs",
                         "problem": f"shape {list(a.shape[1:])} against {list(b.shape[1:])}"})
            continue
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
        differing = int(np.count_nonzero(d))
        rows.append({"index": k, "name": t.name, "dtype": str(a.dtype), "shape": list(a.shape[1:]),
                     "elements": int(a.size), "differing": differing,
                     "fraction": differing / a.size if a.size else 0.0,
                     "max_diff": float(d.max(initial=0.0)), "unit": "LSB" if integer else "abs"})
    return rows


def _finding_dicts(findings: list[T.Finding]) -> list[dict[str, Any]]:
    return [{**f.as_dict(), **f.extra} for f in findings]


def _tool_finding(target: str, rule: str, message: str, source: str, op_index: int | None, model: Any,
                  static: list[T.Finding], effect: str = "fails") -> T.Finding:
    sg = model.subgraphs[0]
    op = sg.operators[op_index].builtin if op_index is not None and 0 <= op_index < len(sg.operators) else None
    same = [f for f in static if f.effect in ("fails", "wrong") and (op_index is None or f.op_index == op_index)]
    if op_index is None:
        same = [f for f in same if f.op_index is None] or same
    tensor = next((f.tensor for f in same if f.tensor), None)
    extra: dict[str, Any] = {"explained_by": list(dict.fromkeys(f.rule for f in same))}
    finding = T.Finding(target, rule, effect, message, source, 0, op_index, op, tensor,
                        next((f.fix for f in same if f.fix), ""), extra=extra)
    if same:
        finding.because = same[0].message.split(": ")[0]
    return finding


@dataclass
class _Context:
    path: str
    model: Any
    size: int
    n: int
    seed: int
    versions: dict[str, str | None]
    runs: dict[str, RunResult] = field(default_factory=dict)
    vela: dict[str, VelaResult] = field(default_factory=dict)


def _ms(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _diff_text(rows: list[dict[str, Any]], ref: str) -> str:
    if not rows:
        return ""
    total = sum(r["elements"] for r in rows)
    bad = sum(r["differing"] for r in rows)
    if not bad:
        return f"equal to {ref} on all {total} output values"
    worst = max(r["max_diff"] for r in rows)
    unit = rows[0]["unit"]
    worst_text = f"{worst:.0f} LSB" if unit == "LSB" else f"{worst:.3g}"
    return f"{bad} of {total} output values differ from {ref} ({100 * bad / total:.2g} %), at most {worst_text}"


def _litert_target(ctx: _Context, target: str, static: list[T.Finding]) -> dict[str, Any]:
    run = ctx.runs["ref" if target == "litert-ref" else "default"]
    silent = [f for f in static if not f.tool_sees]
    tool = {"name": "ai-edge-litert", "version": ctx.versions["litert"], "seconds": round(run.seconds, 3)}
    kind = "reference kernels" if target == "litert-ref" else "default kernels"
    if not run.ok:
        problems = [_tool_finding(target, "litert-run", f"LiteRT: {run.error}", f"ai-edge-litert {tool['version']} "
                                  f"run ({kind})", run.op_index, ctx.model, static), *silent]
        return _entry(target, "tool", tool, problems, None,
                      f"LiteRT {tool['version']} ({kind}) {_failure_text(problems[0], run.error)}")
    cost: dict[str, Any] = {"seconds_per_inference": run.seconds_per_inference, "reference": None, "exact": None,
                            "outputs": []}
    summary = f"LiteRT {tool['version']} ({kind}): {ctx.n} inputs, {_ms(run.seconds_per_inference)} per inference"
    ref = ctx.runs.get("ref")
    if target == "litert" and ref is not None and ref.ok and not any(f.rule == "blockwise" for f in
                                                                      T.static_check(ctx.model, "litert-ref")):
        rows = compare_outputs(ctx.model, run.outputs, ref.outputs)
        cost.update(reference="litert-ref", exact=all(r["differing"] == 0 for r in rows), outputs=rows)
        summary += "; " + _diff_text(rows, "litert-ref")
    if silent:
        summary += "; " + silent[0].message.split(":")[0]
    return _entry(target, "tool", tool, silent, cost, summary)


def _tflm_target(ctx: _Context, static: list[T.Finding]) -> dict[str, Any]:
    run = ctx.runs["tflm"]
    version = ctx.versions["tflm"]
    tool = {"name": "tflite-micro", "version": version, "seconds": round(run.seconds, 3)}
    if not run.ok:
        problem = _tool_finding("tflm", "tflm-run", f"TFLite Micro: {run.error}", f"tflite-micro {version} run",
                                run.op_index, ctx.model, static)
        return _entry("tflm", "tool", tool, [problem], None, f"TFLite Micro {_failure_text(problem, run.error)}")
    cost: dict[str, Any] = {"arena_bytes": run.arena_bytes, "arena_recorded_bytes": run.arena_recorded,
                            "seconds_per_inference": run.seconds_per_inference, "reference": None, "exact": None,
                            "outputs": []}
    arena = run.arena_bytes or run.arena_recorded
    summary = f"TFLite Micro: {ctx.n} inputs, arena {arena if arena is not None else '?'} B"
    ref_key = "ref" if "ref" in ctx.runs and ctx.runs["ref"].ok else "default"
    ref = ctx.runs.get(ref_key)
    notes = []
    if ref is not None and ref.ok:
        name = "litert-ref" if ref_key == "ref" else "litert"
        if ref_key == "default":
            notes.append("LiteRT's reference kernels cannot run this file: compared with its default kernels")
        rows = compare_outputs(ctx.model, run.outputs, ref.outputs)
        cost.update(reference=name, exact=all(r["differing"] == 0 for r in rows), outputs=rows)
        summary += "; " + _diff_text(rows, name)
        if any(r["differing"] for r in rows) and any(o.builtin in T.TFLM_ROUNDS_OTHERWISE
                                                      for o in ctx.model.subgraphs[0].operators):
            notes.append("TFLite Micro's FULLY_CONNECTED rescales with a 32-bit multiplier where LiteRT 2.3's "
                         "reference kernel uses double precision: 1-2 LSB apart on some outputs is expected")
    return _entry("tflm", "tool", tool, [], cost, summary, notes)


def _ethos_target(ctx: _Context, target: str, static: list[T.Finding]) -> dict[str, Any]:
    res = ctx.vela[target]
    tool = {"name": "ethos-u-vela", "version": ctx.versions["vela"], "seconds": round(res.seconds, 3)}
    if not res.ok:
        fatal = [f for f in static if f.effect == "fails"]
        message = res.error or "Vela failed"
        if fatal:
            message += f"; the file breaks a known Vela constraint: {fatal[0].message}"
        if fatal and res.error:
            because = f"{res.error.removeprefix('Vela ')}: {fatal[0].message.split(': ')[0]}"
        problem = _tool_finding(target, "vela-compile", message, f"ethos-u-vela {tool['version']} compile", None,
                                ctx.model, static)
        if fatal and res.error:
            problem.because = because
        return _entry(target, "tool", tool, [problem], None,
                      f"Vela {tool['version']} {_failure_text(problem, res.error, 'fails')}")
    problems = []
    sg = ctx.model.subgraphs[0]
    for k, reason in res.cpu.items():
        f = _tool_finding(target, "vela-cpu", f"{sg.operators[k].builtin} stays on the CPU: "
                          f"{reason or 'no reason given by Vela'}", f"ethos-u-vela {tool['version']} "
                          f"(--show-cpu-operations)", k, ctx.model,
                          [s for s in static if s.effect == "cpu"], effect="cpu")
        problems.append(f)
    c = res.cost
    total = c["npu_ops"] + c["cpu_ops"]
    summary = (f"Vela {tool['version']}: {c['npu_ops']}/{total} ops on the NPU; SRAM {_kib(c['sram_bytes'])}, "
               f"flash {_kib(c['off_chip_flash_bytes'] + c['on_chip_flash_bytes'])}"
               + (f", DRAM {_kib(c['dram_bytes'])}" if c["dram_bytes"] else "")
               + (f"; {_ms(c['inference_seconds'])} per inference" if np.isfinite(c["inference_seconds"]) else "")
               + f" ({c['system_config']}, {c['memory_mode']})")
    notes = ["operators left to the CPU run in TFLite Micro beside the NPU"] if problems else []
    return _entry(target, "tool", tool, problems, c, summary, notes)


def _failure_text(problem: T.Finding, error: str | None, verb: str = "rejects the file") -> str:
    """``rejects the file at op 5 FULLY_CONNECTED: <the static rule that explains it, or the tool's words>``."""
    at = f" at op {problem.op_index} {problem.op}" if problem.op_index is not None else ""
    why = (error or "").split("; ")[0]
    for line in (error or "").split("; "):
        if re.search(r"not supported|was not true|crashed|Didn't find", line):
            why = line
            break
    if problem.because:
        why = problem.because
    if verb == "fails":
        return why.removeprefix("Vela ")
    return f"{verb}{at}: {why}"


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.2f} MiB"


def _entry(target: str, basis: str, tool: dict[str, Any] | None, problems: list[T.Finding],
           cost: dict[str, Any] | None, summary: str, notes: list[str] | None = None) -> dict[str, Any]:
    return {"target": target, "description": T.TARGET_NAMES[target], "verdict": T.verdict(problems), "basis": basis,
            "tool": tool, "summary": summary, "problems": _finding_dicts(problems), "cost": cost,
            "notes": list(notes or [])}


def _static_summary(target: str, findings: list[T.Finding]) -> str:
    v = T.verdict(findings)
    if v == "runs":
        return "no known constraint broken"
    bad = [f for f in findings if f.effect in ("fails", "wrong")] or findings
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    return bad[0].message.split(":")[0] + more


_INSTALL = {"tflm": ("tflite-micro", "tflm"), "vela": ("ethos-u-vela", "vela")}


def check_model(path: str, targets: list[str], n_inputs: int = DEFAULT_INPUTS, seed: int = 0,
                static_only: bool = False, vela_config: str | None = None, vela_args: tuple[str, ...] = (),
                fail_on_cpu: bool = False) -> dict[str, Any]:
    """The JSON document (see the module docstring)."""
    import tempfile

    if n_inputs < 1:
        raise UsageError("--inputs must be at least 1")
    from qconvert.tools.dump import load_tflite

    model, size = load_tflite(path)
    statics = {t: T.static_check(model, t) for t in targets}
    versions = tool_versions() if not static_only else {"litert": None, "tflm": None, "vela": None}
    ctx = _Context(path, model, size, n_inputs, seed, versions)
    want_tflm = "tflm" in targets and versions["tflm"] is not None
    want_vela = [t for t in targets if t in T.ETHOS_U and versions["vela"] is not None]
    runs: dict[str, bool] = {}  # child runs: name → search the arena
    if versions["litert"] is not None:
        if "litert-ref" in targets:
            runs["ref"] = False
        if "litert" in targets:
            runs["default"] = False
    if want_tflm:
        runs["tflm"] = True
        ref_blocked = any(f.effect in ("fails", "wrong") for f in T.static_check(model, "litert-ref"))
        if versions["litert"] is not None:
            runs["default" if ref_blocked else "ref"] = False
    with tempfile.TemporaryDirectory(prefix="qconvert-check-") as work:
        inputs_path = ""
        if runs:
            feeds = random_inputs(model, n_inputs, seed)
            inputs_path = os.path.join(work, "inputs.npz")
            np.savez(inputs_path, **{f"in{k}": x for k, x in enumerate(feeds)})
        n_out = len(model.subgraphs[0].outputs)
        jobs = {}
        with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
            for name, search in runs.items():
                jobs[("run", name)] = pool.submit(_run_child, name, os.path.abspath(path), inputs_path, work, n_out,
                                                  search)
            for t in want_vela:
                jobs[("vela", t)] = pool.submit(run_vela, path, model, t, vela_config, vela_args)
            for (kind, name), fut in jobs.items():
                if kind == "run":
                    ctx.runs[name] = fut.result()
                else:
                    ctx.vela[name] = fut.result()
    entries = []
    for t in targets:
        static = statics[t]
        if t in T.LITERT and ("ref" if t == "litert-ref" else "default") in ctx.runs:
            e = _litert_target(ctx, t, static)
        elif t == "tflm" and "tflm" in ctx.runs:
            e = _tflm_target(ctx, static)
        elif t in ctx.vela:
            e = _ethos_target(ctx, t, static)
        else:
            notes = []
            tool_key = "tflm" if t == "tflm" else "vela" if t in T.ETHOS_U else "litert"
            if not static_only and tool_key in _INSTALL:
                dist, extra = _INSTALL[tool_key]
                notes.append(f"{dist} is not installed: static check only (pip install 'qconvert[{extra}]')")
            elif static_only:
                notes.append("static check only (--static)")
            e = _entry(t, "static", None, static, None, "static: " + _static_summary(t, static), notes)
        e["static"] = {"verdict": T.verdict(static), "problems": _finding_dicts(static)}
        entries.append(e)
    bad = {"cannot-run", "partial"} if fail_on_cpu else {"cannot-run"}
    return {"schema_version": SCHEMA_VERSION,
            "file": {"name": os.path.basename(path), "bytes": size, "operators": len(model.subgraphs[0].operators)},
            "inputs": {"count": n_inputs, "seed": seed},
            "ok": not any(e["verdict"] in bad for e in entries), "targets": entries}


# ---------------------------------------------------------------------------
# Text


def _where(f: dict[str, Any]) -> str:
    parts = []
    if f["op_index"] is not None:
        parts.append(f"op {f['op_index']} {f['op']}" + (f" (subgraph {f['subgraph']})" if f["subgraph"] else ""))
    if f["tensor"] and f"'{f['tensor']}'" not in f["message"]:
        parts.append(f"tensor '{f['tensor']}'")
    return ", ".join(parts)


def _problem_lines(problems: list[dict[str, Any]], limit: int = 6) -> list[str]:
    out = []
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for f in problems:
        by_rule.setdefault(f["rule"], []).append(f)
    for rule, group in by_rule.items():
        for f in group[:limit]:
            where = _where(f)
            out.append(f"    {f['effect']:5s}  {where + ': ' if where else ''}{f['message']}")
        if len(group) > limit:
            out.append(f"           ... and {len(group) - limit} more ({rule})")
        first = group[0]
        if first.get("fix"):
            out.append(f"           fix: {first['fix']}")
        out.append(f"           source: {first['source']}")
    return out


def render_text(doc: dict[str, Any]) -> str:
    from qconvert.tools.text import table

    f = doc["file"]
    head = (f"check {f['name']}: {f['operators']} operators, {f['bytes']} bytes; "
            f"{doc['inputs']['count']} random inputs (seed {doc['inputs']['seed']})")
    rows = [["target", "verdict", "basis", "summary"]]
    for e in doc["targets"]:
        rows.append([e["target"], _VERDICT_TEXT[e["verdict"]], e["basis"], e["summary"]])
    lines = [head, "", *table(rows, max_width=20)]
    shown: dict[tuple[str, ...], str] = {}
    for e in doc["targets"]:
        detail = []
        problems = e["problems"]
        if e["verdict"] == "cannot-run":
            problems = [f for f in problems if f["effect"] != "cpu"]
            hidden = len(e["problems"]) - len(problems)
        if problems:
            detail += _problem_lines(problems)
        if e["verdict"] == "cannot-run" and hidden:
            detail.append(f"    ({hidden} more findings: ops that would stay on the CPU; see --json)")
        cost = e["cost"] or {}
        if cost.get("outputs") and cost.get("reference") and not cost.get("exact"):
            rows = [["output", "dtype", "values", "differing", "max"]]
            for r in cost["outputs"]:
                share = f"{r['differing']} ({100 * r['fraction']:.2g} %)"
                worst = f"{r['max_diff']:.0f} LSB" if r["unit"] == "LSB" else f"{r['max_diff']:.3g}"
                rows.append([r["name"], r["dtype"], str(r["elements"]), share, worst])
            detail += [f"    outputs against {cost['reference']}:", *["  " + ln for ln in table(rows)]]
        detail += [f"    note: {n}" for n in e["notes"]]
        if e["basis"] == "tool" and e["static"]["problems"] and e["verdict"] == "runs":
            detail.append(f"    note: the static check expected '{e['static']['verdict']}' "
                          f"({e['static']['problems'][0]['message'].split(':')[0]}); the tool's verdict wins")
        if detail:
            key = tuple(detail)
            if key in shown:
                lines.append(f"{e['target']}: {_VERDICT_TEXT[e['verdict']]}, as {shown[key]}")
                continue
            shown[key] = e["target"]
            lines += ["", f"{e['target']}: {_VERDICT_TEXT[e['verdict']]}", *detail]
    verdict = "every target can run it" if doc["ok"] else "a target cannot run it"
    return "\n".join([*lines, "", verdict]) + "\n"


def check_command(path: str, targets: tuple[str, ...], as_json: bool = False, n_inputs: int = DEFAULT_INPUTS,
                  seed: int = 0, static_only: bool = False, vela_config: str | None = None,
                  vela_args: tuple[str, ...] = (), fail_on_cpu: bool = False) -> tuple[str, int]:
    """The command's output and exit status."""
    doc = check_model(path, parse_targets(targets), n_inputs, seed, static_only, vela_config, vela_args, fail_on_cpu)
    text = json.dumps(_jsonable(doc), indent=1) + "\n" if as_json else render_text(doc)
    return text, 0 if doc["ok"] else 1


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return _jsonable(float(value))
    return value


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--worker":
    _worker(json.loads(sys.argv[2]))
