"""The documentation, checked against the code (issue 33).

1. The README is a front door: at most 160 lines, the two set-up commands at the top exactly as
   they are (``.ci/run`` runs the second), and its pipeline picture names the pipeline's
   ``STAGES`` in order.
2. The stage table of docs/architecture.md is ``qconvert.converter.pipeline.STAGES``: name,
   package and summary of every stage, in order (moved here from tests/test_layers.py, where it
   read the README).
3. Every relative link in README.md and docs/*.md points to a file that exists, and every
   ``#anchor`` into a Markdown file to one of its headings.
4. docs/formats.md is the single source of truth for the JSON documents: every key that
   ``dump --json``, ``check --json``, ``compare --json`` and ``--report`` write (on the demo
   model) is described in its section.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DIGITS = ROOT / "models" / "digits_qat.pb"
DIGITS_DATA = ROOT / "models" / "digits_test.npz"

SETUP_COMMANDS = [
    'python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/qconvert models/digits_qat.pb -o digits_qat.tflite'
    ' && .venv/bin/python models/evaluate_digits.py digits_qat.tflite',
    'python3 -m venv .venv && .venv/bin/pip install ".[test]" && .venv/bin/pip install --no-deps'
    ' keras-cv-attention-models==1.4.3 && .venv/bin/python -m pytest -q',
]

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _links(path: Path) -> list[str]:
    """The link targets of a Markdown file, outside fenced code blocks."""
    return _LINK.findall(_FENCE.sub("", path.read_text(encoding="utf-8")))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _rel(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


# ---------------------------------------------------------------------------
# 1. The README


def test_readme_is_at_most_160_lines() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 160, f"README.md has {n} lines; it is the front door (at most ~150): move reference text to docs/"


def test_readme_starts_with_the_setup_commands_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = _FENCE.search(text)
    assert first_block is not None
    lines = first_block.group(0).splitlines()[1:-1]
    assert lines == SETUP_COMMANDS, "the README's two set-up commands are a contract: keep them as they are"
    assert text.index(first_block.group(0)) < text.index("\n## "), "the set-up commands come before any section"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert SETUP_COMMANDS[1] in ci.splitlines(), ".ci/run must run exactly the README's test command"


def test_readme_pipeline_picture_names_the_stages() -> None:
    from qconvert.converter.pipeline import STAGES

    picture = [line for line in README.read_text(encoding="utf-8").splitlines() if "──import──▶" in line]
    assert len(picture) == 1, "the README has one pipeline picture"
    stages = re.search(r"\(TF ops, float\) ──▶(.*)──write──▶", picture[0])
    assert stages is not None, picture[0]
    assert [s.strip() for s in stages.group(1).split("▶")] == [s.name for s in STAGES]


# ---------------------------------------------------------------------------
# 2. The stage table


def test_architecture_stage_table_is_the_stages() -> None:
    from qconvert.converter.pipeline import STAGES

    doc = (DOCS / "architecture.md").read_text(encoding="utf-8")
    rows = [line for line in doc.splitlines() if line.startswith("| `") and "` | `qconvert/" in line]
    listed = [r.split("`")[1] for r in rows]
    assert listed == [s.name for s in STAGES], "docs/architecture.md's stage table differs from STAGES"
    for stage, r in zip(STAGES, rows):
        assert f"`qconvert/{stage.package}/`" in r and stage.summary in r, r


# ---------------------------------------------------------------------------
# 3. Links


def test_every_relative_link_points_to_an_existing_file() -> None:
    broken = []
    for md in _markdown_files():
        for target in _links(md):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (md.parent / file_part).resolve() if file_part else md.resolve()
            if not dest.is_relative_to(ROOT):
                broken.append(f"{_rel(md)}: {target} leaves the repository")
                continue
            if not dest.exists():
                broken.append(f"{_rel(md)}: {target} does not exist")
                continue
            if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{_rel(md)}: {target}: no heading '#{anchor}' in {_rel(dest)}")
    assert not broken, "\n".join(broken)


def test_the_expected_files_are_linked() -> None:
    linked = set()
    for md in _markdown_files():
        for target in _links(md):
            file_part = target.partition("#")[0]
            if file_part and not re.match(r"[a-z][a-z0-9+.-]*:", target):
                linked.add(_rel(md.parent / file_part))
    assert {"docs/cli.md", "docs/adding-an-op.md"} <= linked, "README.md or docs/ must link the reference and the op guide"
    assert "docs/cli.md" in {_rel(README.parent / t.partition("#")[0]) for t in _links(README)}


def test_the_link_checks_can_fail() -> None:
    """The helpers above find links, skip code blocks and compute GitHub's anchors."""
    assert _slug("`qconvert dump --json`") == "qconvert-dump---json"
    assert _slug("Statistics files (`--save-stats`, `--stats`)") == "statistics-files---save-stats---stats"
    assert _slug("Other runtimes' arithmetic") == "other-runtimes-arithmetic"
    text = "see [a](x.md#b) and ![img](y.png)\n```\n[c](z.md)\n```\n"
    assert _LINK.findall(_FENCE.sub("", text)) == ["x.md#b"]


# ---------------------------------------------------------------------------
# 4. The JSON formats


def _section(heading: str) -> str:
    doc = (DOCS / "formats.md").read_text(encoding="utf-8")
    start = doc.index(f"\n## {heading}\n")
    end = doc.find("\n## ", start + 1)
    return doc[start:end if end > 0 else len(doc)]


def _keys(doc: object, skip: frozenset[str] = frozenset()) -> set[str]:
    """Every dict key in a JSON document, not descending into keys in ``skip`` (whose own keys
    are data: op names, dtypes, op options)."""
    out: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.add(k)
            if k not in skip:
                out |= _keys(v, skip)
    elif isinstance(doc, list):
        for v in doc:
            out |= _keys(v, skip)
    return out


def _qconvert(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "qconvert", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("docs")
    proc = _qconvert(str(DIGITS), "-o", "digits.tflite", "--report", "report.json", cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    return tmp


def _undocumented(keys: set[str], heading: str) -> list[str]:
    section = _section(heading)
    return sorted(k for k in keys if f'"{k}"' not in section)


def test_formats_describe_every_dump_json_key(digits: Path) -> None:
    keys = set()
    for extra in ([], ["--tensor", "0"]):
        proc = _qconvert("dump", "digits.tflite", "--json", *extra, cwd=digits)
        assert proc.returncode == 0, proc.stderr
        keys |= _keys(json.loads(proc.stdout), frozenset({"options", "ops", "buffer_bytes_by_dtype"}))
    assert not _undocumented(keys, "`qconvert dump --json`")


def test_formats_describe_every_check_json_key(digits: Path) -> None:
    proc = _qconvert("check", "digits.tflite", "--static", "--json", cwd=digits)
    assert proc.returncode == 0, proc.stderr
    assert not _undocumented(_keys(json.loads(proc.stdout)), "`qconvert check --json`")


def test_formats_describe_every_compare_json_key(digits: Path) -> None:
    proc = _qconvert("compare", str(DIGITS), "digits.tflite", "--data", str(DIGITS_DATA), "--samples", "4", "--json",
                     cwd=digits)
    assert proc.returncode == 0, proc.stderr
    assert not _undocumented(_keys(json.loads(proc.stdout)), "`qconvert compare --json`")


def test_formats_describe_every_report_key(digits: Path) -> None:
    doc = json.loads((digits / "report.json").read_text())
    schema = json.loads((ROOT / "qconvert" / "tools" / "report_schema.json").read_text())
    keys = _keys(doc, frozenset({"op_histogram"})) | set(schema["properties"]) \
        | set(schema["properties"]["shard"]["properties"]) | set(schema["$defs"]["record"]["properties"]) \
        | set(schema["$defs"]["tensor"]["properties"])
    section = _section("Conversion reports (`--report`)")
    assert not sorted(k for k in keys if f'"{k}"' not in section and f"`{k}`" not in section)
