"""Reading and writing files with one-line errors for the usual mistakes; writes are atomic
(a temporary file renamed), so there is never a half-written output.

May import: ``qconvert.errors``."""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from qconvert.errors import ConversionError


@contextmanager
def _reading(source: str, kind: str) -> Iterator[None]:
    """Turns the usual reasons a file cannot be read into one-line ConversionErrors."""
    if os.path.isdir(source):
        raise ConversionError(f"{source}: is a directory, not {kind}")
    try:
        yield
    except FileNotFoundError:
        raise ConversionError(f"{source}: no such file") from None
    except PermissionError:
        raise ConversionError(f"{source}: cannot read the file (permission denied)") from None
    except OSError as e:
        raise ConversionError(f"{source}: cannot read the file ({e.strerror or e})") from None


def read_bytes(path: str | os.PathLike[str], kind: str) -> bytes:
    """The file's bytes; a missing, unreadable or directory path is a ConversionError.

    ``kind`` names what was expected ("a GraphDef .pb file", "a .tflite file").
    """
    source = os.fspath(path)
    with _reading(source, kind), open(source, "rb") as f:
        return f.read()


def read_buffer(path: str | os.PathLike[str], kind: str) -> memoryview:
    """The file's bytes in one numpy buffer (as a memoryview), with ``read_bytes``'s errors.

    The buffer is numpy's, which asks the kernel for huge pages: reading a 95 MB frozen graph
    faults 700 pages instead of the 23,000 of a bytes object (36 ms against 68 ms measured; a
    page fault is costly in a virtual machine)."""
    import numpy as np  # here: io is imported by commands that never read a model

    source = os.fspath(path)
    with _reading(source, kind), open(source, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        buffer = np.empty(size + 1, np.uint8)  # one spare byte tells a file that grew
        view, got = memoryview(buffer), 0
        while got <= size:
            n = f.readinto(view[got:])
            if not n:
                break
            got += n
        if got > size:  # it grew while we read it: read the rest too
            return memoryview(bytes(buffer) + f.read())
    return memoryview(buffer)[:got]


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename: never a partial file."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ConversionError(f"cannot write '{target}': directory '{folder}' does not exist")
    if target.is_dir():
        raise ConversionError(f"cannot write '{target}': it is a directory")
    try:
        fd, tmp = _create_beside(folder, target.name)
    except OSError as exc:
        raise ConversionError(f"cannot write '{target}': {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ConversionError(f"cannot write '{target}': {exc.strerror}") from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _create_beside(folder: Path, name: str) -> tuple[int, str]:
    """A new file ``folder/.name.PID.K.tmp`` (the first K free), opened for writing: what
    ``tempfile.mkstemp`` does, without importing tempfile (random and hashlib: 3 ms of every conversion)."""
    for k in range(10_000):
        tmp = os.path.join(folder, f".{name}.{os.getpid()}.{k}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(folder))
