"""``qconvert.io.write_atomic``: the whole file or none, under the target's name only."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from qconvert.errors import ConversionError
from qconvert.io import write_atomic


def test_writes_replaces_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "m.tflite"
    write_atomic(target, b"first")
    (tmp_path / f".m.tflite.{os.getpid()}.0.tmp").write_bytes(b"someone else's")  # a name taken: the next one
    write_atomic(target, b"second")
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".m.tflite.{os.getpid()}.0.tmp", "m.tflite"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "m.tflite"
    target.write_bytes(b"old")

    with pytest.raises(TypeError):
        write_atomic(target, object())  # type: ignore[arg-type]  # not bytes: the write fails
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["m.tflite"]
    with pytest.raises(ConversionError, match="does not exist"):
        write_atomic(tmp_path / "nowhere" / "m.tflite", b"x")
    with pytest.raises(ConversionError, match="is a directory"):
        write_atomic(tmp_path, b"x")
