"""What ``qconvert check`` says of each target: the verdict, what decided it, and what the file
costs there, from the static findings (``qconvert.tools.targets``) and the tools' runs.

Verdicts: ``runs``; ``partial`` (Ethos-U: some operators stay on the CPU, where TFLite Micro
runs them beside the NPU); ``cannot-run``. The tool's verdict wins; static findings a run
cannot reveal (LiteRT's reference kernels read blockwise weights as zeros, silently) still
count. Each target becomes one entry of the JSON document (``qconvert.tools.check``'s docstring
gives its shape), with a one-line ``summary`` that the text output shows.

May import: ``qconvert.tools.targets``, the check's runners (output comparison), numpy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qconvert.tools import targets as T
from qconvert.tools.check.runners import RunResult, compare_outputs
from qconvert.tools.check.vela import VelaResult

_INSTALL = {"tflm": ("tflite-micro", "tflm"), "vela": ("ethos-u-vela", "vela")}


@dataclass
class Context:
    """One check: the file, the inputs asked for, the tools' versions and their results."""

    path: str
    model: Any
    size: int
    n: int
    seed: int
    versions: dict[str, str | None]
    runs: dict[str, RunResult] = field(default_factory=dict)  # "ref", "default", "tflm"
    vela: dict[str, VelaResult] = field(default_factory=dict)  # by target


def target_entry(ctx: Context, target: str, static: list[T.Finding], static_only: bool) -> dict[str, Any]:
    """The document's entry for ``target``: from its tool's run when there was one, else static."""
    if target in T.LITERT and ("ref" if target == "litert-ref" else "default") in ctx.runs:
        e = _litert_target(ctx, target, static)
    elif target == "tflm" and "tflm" in ctx.runs:
        e = _tflm_target(ctx, static)
    elif target in ctx.vela:
        e = _ethos_target(ctx, target, static)
    else:
        notes = []
        tool_key = "tflm" if target == "tflm" else "vela" if target in T.ETHOS_U else "litert"
        if not static_only and tool_key in _INSTALL:
            dist, extra = _INSTALL[tool_key]
            notes.append(f"{dist} is not installed: static check only (pip install 'qconvert[{extra}]')")
        elif static_only:
            notes.append("static check only (--static)")
        e = _entry(target, "static", None, static, None, "static: " + _static_summary(target, static), notes)
    e["static"] = {"verdict": T.verdict(static), "problems": _finding_dicts(static)}
    return e


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


def _litert_target(ctx: Context, target: str, static: list[T.Finding]) -> dict[str, Any]:
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


def _tflm_target(ctx: Context, static: list[T.Finding]) -> dict[str, Any]:
    run = ctx.runs["tflm"]
    version = ctx.versions["tflm"]
    tool = {"name": "tflite-micro", "version": version, "seconds": round(run.seconds, 3)}
    silent = [f for f in static if not f.tool_sees]  # wrong values a run cannot tell from right ones
    if not run.ok:
        problem = _tool_finding("tflm", "tflm-run", f"TFLite Micro: {run.error}", f"tflite-micro {version} run",
                                run.op_index, ctx.model, static)
        return _entry("tflm", "tool", tool, [problem, *silent], None, f"TFLite Micro {_failure_text(problem, run.error)}")
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
    if silent:
        summary += "; " + silent[0].message.split(":")[0]
    return _entry("tflm", "tool", tool, silent, cost, summary, notes)


def _ethos_target(ctx: Context, target: str, static: list[T.Finding]) -> dict[str, Any]:
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
