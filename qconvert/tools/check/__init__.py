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

JSON (``--json``, schema_version 1): every key is in docs/formats.md ("qconvert check --json"),
the single description of the format; tests/test_docs.py checks that it names every key written.

Modules: ``runners`` (LiteRT and TFLite Micro in child processes, the arena search, random
inputs, output comparison), ``vela`` (Vela's compile and report), ``verdict`` (each target's
entry), ``render`` (text and JSON); this file runs them in order (``check_model``).

May import: ``qconvert.schema``, ``qconvert.tools.targets``, ``qconvert.tools.tflite_file`` (loading),
``qconvert.errors``, numpy; tflite_micro and ethos-u-vela only in the child processes that run them.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from qconvert.errors import UsageError
from qconvert.options import parse_targets
from qconvert.tools import targets as T
from qconvert.tools.check.render import render_json, render_text
from qconvert.tools.check.runners import (
    ARENA_STEP,
    RunResult,
    _arena_works,  # noqa: F401 - the tests probe the arena search
    compare_outputs,
    random_inputs,
    run_child,
    tool_versions,
)
from qconvert.tools.check.vela import VelaResult, run_vela
from qconvert.tools.check.verdict import Context, target_entry

__all__ = ["ARENA_STEP", "DEFAULT_INPUTS", "SCHEMA_VERSION", "RunResult", "VelaResult", "check_command",
           "check_model", "compare_outputs", "parse_targets", "random_inputs", "render_json", "render_text",
           "run_vela", "tool_versions"]

SCHEMA_VERSION = 1
DEFAULT_INPUTS = 8


def check_model(path: str, targets: list[str], n_inputs: int = DEFAULT_INPUTS, seed: int = 0,
                static_only: bool = False, vela_config: str | None = None, vela_args: tuple[str, ...] = (),
                fail_on_cpu: bool = False) -> dict[str, Any]:
    """The JSON document (see the module docstring)."""
    if n_inputs < 1:
        raise UsageError("--inputs must be at least 1")
    from qconvert.tools.tflite_file import load_tflite

    model, size = load_tflite(path)
    statics = {t: T.static_check(model, t) for t in targets}
    versions = tool_versions() if not static_only else {"litert": None, "tflm": None, "vela": None}
    ctx = Context(path, model, size, n_inputs, seed, versions)
    _run_tools(ctx, _child_runs(model, targets, versions),
               [t for t in targets if t in T.ETHOS_U and versions["vela"] is not None], vela_config, vela_args)
    entries = [target_entry(ctx, t, statics[t], static_only) for t in targets]
    bad = {"cannot-run", "partial"} if fail_on_cpu else {"cannot-run"}
    return {"schema_version": SCHEMA_VERSION,
            "file": {"name": os.path.basename(path), "bytes": size, "operators": len(model.subgraphs[0].operators)},
            "inputs": {"count": n_inputs, "seed": seed},
            "ok": not any(e["verdict"] in bad for e in entries), "targets": entries}


def _child_runs(model: Any, targets: list[str], versions: dict[str, str | None]) -> dict[str, bool]:
    """The child runs the targets need: {"ref" | "default" | "tflm": search the arena}. TFLite
    Micro's outputs are compared with LiteRT's reference kernels, or its default ones when the
    static check says the reference kernels cannot run the file."""
    runs: dict[str, bool] = {}
    if versions["litert"] is not None:
        if "litert-ref" in targets:
            runs["ref"] = False
        if "litert" in targets:
            runs["default"] = False
    if "tflm" in targets and versions["tflm"] is not None:
        runs["tflm"] = True
        ref_blocked = any(f.effect in ("fails", "wrong") for f in T.static_check(model, "litert-ref"))
        if versions["litert"] is not None:
            runs["default" if ref_blocked else "ref"] = False
    return runs


def _run_tools(ctx: Context, runs: dict[str, bool], vela_targets: list[str], vela_config: str | None,
               vela_args: tuple[str, ...]) -> None:
    """The child runs and Vela's compiles, two at a time, into ``ctx.runs`` and ``ctx.vela``."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="qconvert-check-") as work:
        inputs_path = ""
        if runs:
            feeds = random_inputs(ctx.model, ctx.n, ctx.seed)
            inputs_path = os.path.join(work, "inputs.npz")
            np.savez(inputs_path, **{f"in{k}": x for k, x in enumerate(feeds)})
        n_out = len(ctx.model.subgraphs[0].outputs)
        jobs = {}
        with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
            for name, search in runs.items():
                jobs[("run", name)] = pool.submit(run_child, name, os.path.abspath(ctx.path), inputs_path, work,
                                                  n_out, search)
            for t in vela_targets:
                jobs[("vela", t)] = pool.submit(run_vela, ctx.path, ctx.model, t, vela_config, vela_args)
            for (kind, name), fut in jobs.items():
                if kind == "run":
                    ctx.runs[name] = fut.result()
                else:
                    ctx.vela[name] = fut.result()


def check_command(path: str, targets: tuple[str, ...], as_json: bool = False, n_inputs: int = DEFAULT_INPUTS,
                  seed: int = 0, static_only: bool = False, vela_config: str | None = None,
                  vela_args: tuple[str, ...] = (), fail_on_cpu: bool = False) -> tuple[str, int]:
    """The command's output and exit status."""
    doc = check_model(path, parse_targets(targets), n_inputs, seed, static_only, vela_config, vela_args, fail_on_cpu)
    return (render_json(doc) if as_json else render_text(doc)), 0 if doc["ok"] else 1
