"""``qconvert check``'s output: the document as text (a table of verdicts, then what decided
each one that is not a plain "runs") or as JSON (``qconvert.tools.check``'s docstring).

May import: ``qconvert.tools.text``, ``qconvert.tools.jsonable``.
"""

from __future__ import annotations

import json
from typing import Any

from qconvert.tools.jsonable import jsonable

_VERDICT_TEXT = {"runs": "runs", "partial": "partial", "cannot-run": "cannot run"}


def render_json(doc: dict[str, Any]) -> str:
    return json.dumps(jsonable(doc), indent=1) + "\n"




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

