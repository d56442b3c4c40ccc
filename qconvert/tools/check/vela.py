"""Vela, Arm's compiler for the Ethos-U NPUs, behind ``qconvert check --target ethos-u*``.

Vela compiles the file in a temporary directory (its default system configuration and memory
mode for the accelerator, or ``--vela-config`` and ``--vela-arg``), as a child process: Vela 5.2
crashes on any INT4 tensor, and a crash is the verdict "cannot-run". Its outputs give the rest:
the compiled file (operators left outside the ``ethos-u`` custom op run on the CPU), the
"Warning (supported operators)" blocks of ``--show-cpu-operations`` (Vela's reason for each),
and the summary CSV (SRAM, DRAM and flash use, the estimated inference time).

May import: ``qconvert.schema.reader`` (the compiled file), numpy; ethos-u-vela only in the
child process that runs it.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qconvert.tools.check.runners import signal_text

VELA_TIMEOUT = 900.0


@dataclass
class VelaResult:
    ok: bool
    error: str | None = None
    seconds: float = 0.0
    cost: dict[str, Any] = field(default_factory=dict)
    cpu: dict[int, str | None] = field(default_factory=dict)  # file op index → Vela's reason


_WARNING = re.compile(r"^Warning \(supported operators\) operator: (\S+), ofm: '(.*)'$")


def run_vela(model_path: str, model: Any, accelerator: str, vela_config: str | None = None,
             vela_args: tuple[str, ...] = ()) -> VelaResult:
    """Compile with Vela in a temporary directory and read its report."""
    import subprocess
    import tempfile

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
        if done.returncode:
            return VelaResult(False, _failure(done.returncode, done.stdout + "\n" + done.stderr), seconds)
        summary, cpu_names = _read_outputs(out, os.path.splitext(os.path.basename(model_path))[0])
    ops, cpu = _placement(model, cpu_names, _vela_reasons(done.stdout))
    return VelaResult(True, None, seconds, _cost(accelerator, summary, done.stdout, ops, cpu), cpu)


def _failure(returncode: int, text: str) -> str:
    """``Vela crashed (signal SIGFPE): <its last line>`` or ``Vela failed (exit status 1): ...``."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Warning: No ")
             and not ln.startswith(("Traceback", "  File "))]
    crashed = returncode < 0 or returncode > 128
    why = f"crashed ({signal_text(returncode)})" if crashed else f"failed (exit status {returncode})"
    return f"Vela {why}" + (f": {lines[-1]}" if lines else "")


def _read_outputs(out: str, stem: str) -> tuple[dict[str, str], set[str]]:
    """(the summary CSV's row, the output tensor names of the operators left to the CPU)."""
    import csv
    import glob

    from qconvert.schema.reader import read_model

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
    return summary, cpu_names


def _placement(model: Any, cpu_names: set[str], reasons: dict[str, str]
               ) -> tuple[list[dict[str, Any]], dict[int, str | None]]:
    """Each operator of the file on the NPU or the CPU (matched by output tensor name), and
    {op index: Vela's reason} for those on the CPU."""
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
    return ops, cpu


def _cost(accelerator: str, summary: dict[str, str], stdout: str, ops: list[dict[str, Any]],
          cpu: dict[int, str | None]) -> dict[str, Any]:
    """The ``cost`` entry of an Ethos-U target (``qconvert.tools.check``'s JSON shape)."""

    def num(key: str, scale: float = 1.0) -> float:
        try:
            return float(summary.get(key, "nan")) * scale
        except ValueError:
            return float("nan")

    def count(label: str) -> int:
        m = re.search(rf"^{label} operators = (\d+)", stdout, re.M)
        return int(m.group(1)) if m else 0

    kib = lambda key: int(round(num(key, 1024.0))) if np.isfinite(num(key)) else 0  # noqa: E731
    return {"accelerator": accelerator,
            "system_config": summary.get("system_config") or _vela_value(stdout, "System configuration"),
            "memory_mode": summary.get("memory_mode") or _vela_value(stdout, "Memory mode"),
            "npu_ops": len(ops) - len(cpu), "cpu_ops": len(cpu),
            "vela_npu_operators": count("NPU"), "vela_cpu_operators": count("CPU"), "ops": ops,
            "sram_bytes": kib("sram_memory_used"), "dram_bytes": kib("dram_memory_used"),
            "on_chip_flash_bytes": kib("on_chip_flash_memory_used"),
            "off_chip_flash_bytes": kib("off_chip_flash_memory_used"),
            "inference_seconds": num("inference_time"), "inferences_per_second": num("inferences_per_second"),
            "cycles": int(num("cycles_total")) if np.isfinite(num("cycles_total")) else 0,
            "macs": int(num("nn_macs")) if np.isfinite(num("nn_macs")) else 0}


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
