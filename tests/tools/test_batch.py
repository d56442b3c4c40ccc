"""``qconvert batch`` and ``--report``: manifest, failures, report schema, determinism, --check, --jobs.

Runs on the models in models/ and needs no TensorFlow.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qconvert.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "models" / "example_qat.pb"
DIGITS = ROOT / "models" / "digits_qat.pb"
SCHEMA = json.loads((ROOT / "qconvert" / "tools" / "report_schema.json").read_text())
GOOD = ("digits_qat", "example_qat")
MANIFEST = """
[defaults]
output_dir = "out"

[[model]]
path = "models/example_qat.pb"
inputs_range = { input = "-1,1" }
"""


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), CI="true")
    return subprocess.run([sys.executable, "-m", "qconvert", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


# A tiny JSON Schema (2020-12 subset) validator: enough for report_schema.json.
_TYPES = {"object": dict, "array": list, "string": str, "null": type(None), "boolean": bool}


def _is(value, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def validate(value, schema: dict, root: dict = SCHEMA, path: str = "$") -> None:
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return validate(value, target, root, path)
    known = {"$schema", "$id", "title", "description", "type", "const", "enum", "required", "properties",
             "additionalProperties", "items", "minimum", "pattern", "$defs"}
    assert not set(schema) - known, f"validator does not know {set(schema) - known}"
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        assert any(_is(value, t) for t in types), f"{path}: {value!r} is not {types}"
    if "const" in schema:
        assert value == schema["const"], f"{path}: {value!r} != {schema['const']!r}"
    if "enum" in schema:
        assert value in schema["enum"], f"{path}: {value!r} not in {schema['enum']}"
    if isinstance(value, (int, float)) and "minimum" in schema:
        assert value >= schema["minimum"], f"{path}: {value} < {schema['minimum']}"
    if isinstance(value, str) and "pattern" in schema:
        assert re.search(schema["pattern"], value), f"{path}: {value!r} !~ {schema['pattern']}"
    if isinstance(value, dict):
        for key in schema.get("required", []):
            assert key in value, f"{path}: missing {key!r}"
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                validate(item, props[key], root, f"{path}.{key}")
            elif extra is False:
                raise AssertionError(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                validate(item, extra, root, f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            validate(item, schema["items"], root, f"{path}[{i}]")


def test_the_validator_rejects_bad_reports() -> None:
    good = {"schema_version": 1, "qconvert_version": "x", "models": [], "summary": {"total": 0, "ok": 0, "failed": 0}}
    validate(good, SCHEMA)
    for bad in ({**good, "schema_version": 2}, {**good, "extra": 1}, {k: v for k, v in good.items() if k != "models"},
                {**good, "models": [{"model": "m"}]}, {**good, "summary": {"total": "0", "ok": 0, "failed": 0}}):
        with pytest.raises(AssertionError):
            validate(bad, SCHEMA)


@pytest.fixture()
def zoo(tmp_path: Path) -> Path:
    """models/: two good models, a corrupt .pb, example_qat without a range; and the manifest."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(EXAMPLE, models / "example_qat.pb")
    shutil.copy(DIGITS, models / "digits_qat.pb")
    shutil.copy(EXAMPLE, models / "norange.pb")
    (models / "corrupt.pb").write_bytes(EXAMPLE.read_bytes()[:200] + b"\xff" * 64)
    (tmp_path / "out").mkdir()
    (tmp_path / "batch.toml").write_text(MANIFEST)
    return tmp_path


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.tflite"))}


def test_batch_converts_the_good_reports_the_bad(zoo: Path) -> None:
    proc = run("batch", "models", "--manifest", "batch.toml", "--report", "report.json", "--jobs", "1", cwd=zoo)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.stem for p in (zoo / "out").glob("*.tflite")) == list(GOOD)
    assert not [p for p in (zoo / "out").iterdir() if p.suffix != ".tflite"], "temporary files left behind"
    lines = proc.stderr.splitlines()
    assert any(re.fullmatch(r"ok example_qat\.pb -> .*example_qat\.tflite \(\d+\.\d\d s\)", ln) for ln in lines)
    assert any(ln.startswith("FAILED corrupt.pb: ") and "not a valid GraphDef" in ln for ln in lines)
    assert any(ln.startswith("FAILED norange.pb: ") and "has no range" in ln for ln in lines)

    report = json.loads((zoo / "report.json").read_text())
    validate(report, SCHEMA)
    assert report["summary"] == {"total": 4, "ok": 2, "failed": 2}
    recs = {Path(r["model"]).stem: r for r in report["models"]}
    assert [Path(r["model"]).name for r in report["models"]] == ["corrupt.pb", "digits_qat.pb", "example_qat.pb",
                                                                 "norange.pb"]  # sorted, not completion order
    assert "not a valid GraphDef" in recs["corrupt"]["error"] and recs["corrupt"]["sha256"] is None
    assert "input 'input' has no range" in recs["norange"]["error"] and recs["norange"]["node"] is None
    hashes = _hashes(zoo / "out")
    for name in GOOD:
        r = recs[name]
        assert r["status"] == "ok" and r["error"] is None and r["float_ops"] == 0
        assert Path(r["output"]) == (zoo / "out" / f"{name}.tflite").resolve()
        assert r["sha256"] == hashes[f"{name}.tflite"] and r["bytes"] == (zoo / "out" / f"{name}.tflite").stat().st_size
        assert r["inputs"][0]["dtype"] == "int8" and r["outputs"][0]["dtype"] == "int8"
        assert r["op_histogram"]["CONV_2D"] == 2
    assert recs["example_qat"]["inputs"][0]["zero_point"] == -1  # the manifest's -1,1 range was used

    # a second run (a new process) and a parallel run give the same bytes
    assert run("batch", "models", "--manifest", "batch.toml", "--jobs", "2", cwd=zoo).returncode == 1
    assert _hashes(zoo / "out") == hashes

    # --check: up to date, then one output modified
    proc = run("batch", "models", "--manifest", "batch.toml", "--check", cwd=zoo)
    assert proc.returncode == 1 and "0 out of date" in proc.stderr  # still 1: two models fail
    good_manifest = MANIFEST + '\n[[model]]\npath = "models/norange.pb"\ninputs_range = "-1,1"\n'
    (zoo / "good.toml").write_text(good_manifest)
    args = ("batch", "models/digits_qat.pb", "models/example_qat.pb", "--manifest", "good.toml")
    proc = run(*args, "--check", cwd=zoo)
    assert proc.returncode == 0, proc.stderr
    (zoo / "out" / "digits_qat.tflite").write_bytes(b"changed")
    stamp = {p.name: p.stat().st_mtime_ns for p in (zoo / "out").iterdir()}
    proc = run(*args, "--check", cwd=zoo)
    assert proc.returncode == 1
    assert "would change: digits_qat.pb" in proc.stderr and "example_qat.pb ->" not in proc.stderr.split("would")[-1]
    assert {p.name: p.stat().st_mtime_ns for p in (zoo / "out").iterdir()} == stamp, "--check wrote something"
    (zoo / "out" / "example_qat.tflite").unlink()
    proc = run(*args, "--check", cwd=zoo)
    assert proc.returncode == 1 and "missing: example_qat.pb" in proc.stderr


def test_jobs_2_gives_the_same_bytes_as_jobs_1_and_reports_to_stdout(zoo: Path) -> None:
    manifest = str(zoo / "batch.toml")
    models = [str(zoo / "models" / f"{n}.pb") for n in GOOD]
    assert main(["batch", *models, "--manifest", manifest, "--jobs", "1"]) == 0
    one = _hashes(zoo / "out")
    for p in (zoo / "out").iterdir():
        p.unlink()
    proc = run("batch", *models, "--manifest", manifest, "--jobs", "2", "--report", "-")
    assert proc.returncode == 0, proc.stderr
    assert _hashes(zoo / "out") == one and len(one) == 2
    report = json.loads(proc.stdout)
    validate(report, SCHEMA)
    assert [r["sha256"] for r in report["models"]] == [one[f"{n}.tflite"] for n in GOOD]


def test_in_process_twice_is_byte_identical(tmp_path: Path) -> None:
    from qconvert import api

    for model, ranges in ((EXAMPLE, {None: (-1.0, 1.0)}), (DIGITS, {})):
        a = api.convert_graph(str(model), ranges).model
        b = api.convert_graph(str(model), ranges).model
        assert a == b


def test_globs_and_default_outputs(tmp_path: Path) -> None:
    shutil.copy(DIGITS, tmp_path / "a.pb")
    shutil.copy(DIGITS, tmp_path / "b.pb")
    assert main(["batch", str(tmp_path / "*.pb"), "--jobs", "1"]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.tflite")) == ["a.tflite", "b.tflite"]


@pytest.mark.parametrize("manifest, message", [
    ("[defaults\n", "not valid TOML"),
    ("[defaults]\nrange = '-1,1'\n", "unknown key 'range'"),
    ("[[model]]\npath = 'x.pb'\nspeed = 1\n", "unknown key 'speed'"),
    ("[other]\n", "unknown key 'other'"),
    ("[defaults]\ninputs_range = '1,-1'\n", "MIN must be less than MAX"),
    ("[defaults]\nweights = 'int2'\n", "weights = 'int2': expected one of int8, int4"),
    ("[defaults]\nblock_size = 48\n", "block_size = 48: expected one of 32, 64, 128, 256"),
])
def test_bad_manifest_is_a_usage_error(tmp_path: Path, manifest: str, message: str, capsys) -> None:
    shutil.copy(DIGITS, tmp_path / "a.pb")
    (tmp_path / "m.toml").write_text(manifest)
    assert main(["batch", str(tmp_path), "--manifest", str(tmp_path / "m.toml")]) == 2
    err = capsys.readouterr().err
    assert message in err and "usage error" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.tflite"))


def test_manifest_takes_the_storage_options(tmp_path: Path) -> None:
    """``int4_storage`` and ``low_bit_activations`` reach the conversion like the options of
    convert (the digits model has 8-bit weights: int4_storage changes nothing there, and the
    manifest is accepted); ``weights``/``block_size`` on a QAT graph fail that model in one line."""
    shutil.copy(DIGITS, tmp_path / "a.pb")
    shutil.copy(DIGITS, tmp_path / "b.pb")
    (tmp_path / "m.toml").write_text('[defaults]\nint4_storage = "int8"\nlow_bit_activations = "8bit"\n\n'
                                     '[[model]]\npath = "b.pb"\nweights = "int4"\nblock_size = 32\n')
    report = tmp_path / "r.json"
    assert main(["batch", str(tmp_path / "*.pb"), "--manifest", str(tmp_path / "m.toml"), "--jobs", "1",
                 "--report", str(report)]) == 1
    records = {Path(r["model"]).name: r for r in json.loads(report.read_text())["models"]}
    assert records["a.pb"]["status"] == "ok"
    assert records["b.pb"]["status"] == "failed" and "trained with FakeQuant" in records["b.pb"]["error"]


def test_no_models_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["batch", str(tmp_path)]) == 2
    assert main(["batch", str(tmp_path / "*.pb")]) == 2
    assert main(["batch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all("usage error" in ln for ln in err)


def test_convert_report(tmp_path: Path) -> None:
    out = tmp_path / "m.tflite"
    proc = run("convert", str(EXAMPLE), "--inputs-range", "input=-1,1", "-o", str(out), "--report", "-")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    validate(report, SCHEMA)
    (rec,) = report["models"]
    assert rec["status"] == "ok" and rec["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert report["summary"] == {"total": 1, "ok": 1, "failed": 0}
    assert main(["convert", str(EXAMPLE), "-o", str(out), "--report", str(tmp_path / "r.json")]) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    validate(report, SCHEMA)
    assert report["models"][0]["status"] == "failed" and "has no range" in report["models"][0]["error"]
    assert report["summary"] == {"total": 1, "ok": 0, "failed": 1}


def test_node_is_taken_from_the_message() -> None:
    from qconvert.errors import ConversionError
    from qconvert.tools.batch import build_record

    rec = build_record("m.pb", "m.tflite", error=ConversionError("node 'conv1/Conv2D' (Conv2D): bad weights"))
    assert rec["node"] == "conv1/Conv2D" and rec["status"] == "failed"


def test_shards_cover_the_list_once_and_merge_into_the_whole_report(zoo: Path) -> None:
    """A CI matrix: 3 jobs each convert `--shard K/3` of the same list and write a report;
    merge-reports joins them. Oracle: one unsharded run of the same list."""
    args = ("batch", "models", "--manifest", "batch.toml", "--jobs", "1")
    whole = run(*args, "--report", "whole.json", cwd=zoo)
    assert whole.returncode == 1  # corrupt.pb and norange.pb fail, as in one run
    expected = json.loads((zoo / "whole.json").read_text())
    shard_files = []
    for k in (1, 2, 3):
        proc = run(*args, "--shard", f"{k}/3", "--report", f"s{k}.json", cwd=zoo)
        report = json.loads((zoo / f"s{k}.json").read_text())
        validate(report, SCHEMA)
        assert report["shard"] == {"index": k, "count": 3, "models_total": 4}
        assert f"(shard {k}/3 of 4 models)" in proc.stderr
        shard_files.append(f"s{k}.json")
    sizes = [len(json.loads((zoo / f).read_text())["models"]) for f in shard_files]
    assert sizes == [2, 1, 1]  # models 1 and 4, 2, 3 of the sorted list
    proc = run("merge-reports", *shard_files, "-o", "merged.json", cwd=zoo)
    assert proc.returncode == 1 and "merged 3 report(s): 2/4 ok, 2 failed" in proc.stderr  # failures carry over
    merged = json.loads((zoo / "merged.json").read_text())
    validate(merged, SCHEMA)
    key = lambda r: r["model"]  # noqa: E731
    strip = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    assert [strip(r) for r in sorted(merged["models"], key=key)] == [strip(r) for r in sorted(expected["models"],
                                                                                              key=key)]
    assert merged["summary"] == expected["summary"] and merged["shard"] == {"index": None, "count": 3,
                                                                            "models_total": 4}
    # a missing shard, a shard twice, a bad --shard: one line each
    proc = run("merge-reports", "s1.json", "s3.json", cwd=zoo)
    assert proc.returncode == 1 and "shard(s) 2/3 missing" in proc.stderr and "Traceback" not in proc.stderr
    proc = run("merge-reports", "s1.json", "s2.json", "s2.json", "s3.json", cwd=zoo)
    assert proc.returncode == 1 and "given twice" in proc.stderr
    for bad in ("0/3", "4/3", "x"):
        proc = run(*args, "--shard", bad, cwd=zoo)
        assert proc.returncode == 2 and "expected K/N" in proc.stderr
