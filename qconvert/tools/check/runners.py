"""The real runs behind ``qconvert check``: LiteRT and TFLite Micro on random inputs, each in a
child process, and TFLite Micro's smallest tensor arena.

A runtime that crashes must give a verdict, not end the command, so each run is a child
process (``python -m qconvert.tools.check --worker REQUEST``, see ``__main__.py``). The parent
writes the inputs to an ``.npz`` and a JSON request; the child writes the outputs to another
``.npz`` and a small JSON result (``ok``, ``error``, ``seconds_per_inference``, arena sizes).
No result file means the child died: its exit status and the last lines of its stderr are the
error, and a "Node X (number N)" line names the operator.

The arena search starts from TFLite Micro's recorded figure (its RecordingMicroAllocator), then
halves and bisects down to 16 bytes; each try runs in a forked process, since a too-small arena
can crash the interpreter.

May import: numpy, ``qconvert.errors``, ``qconvert.schema.litert`` (in the child); tflite_micro
only in the child processes that run it.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qconvert.errors import ConversionError

ARENA_STEP = 16  # TFLite Micro aligns its allocations to 16 bytes
WORKER_TIMEOUT = 900.0



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


# ---------------------------------------------------------------------------
# Child processes: LiteRT and TFLite Micro


def _pythonpath_env() -> dict[str, str]:
    """This environment, with the directory that holds ``qconvert/`` first on PYTHONPATH (the
    child must import this very qconvert, installed or not)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def signal_text(code: int) -> str:
    """How a child process ended, from its return code: ``signal SIGSEGV`` or ``exit status 3``."""
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


def run_child(runtime: str, model_path: str, inputs_path: str, workdir: str, n_outputs: int,
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
        why = f"crashed ({signal_text(done.returncode)})" if done.returncode else "stopped without a result"
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


def worker(request: dict[str, Any]) -> None:
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
# Inputs and outputs


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

