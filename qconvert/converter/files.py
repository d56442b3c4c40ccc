"""Reading input files with one-line errors for the usual mistakes."""

from __future__ import annotations

import os

from qconvert.converter.ir import ConversionError


def read_bytes(path: str | os.PathLike[str], kind: str) -> bytes:
    """The file's bytes; a missing, unreadable or directory path is a ConversionError.

    ``kind`` names what was expected ("a GraphDef .pb file", "a .tflite file").
    """
    source = os.fspath(path)
    if os.path.isdir(source):
        raise ConversionError(f"{source}: is a directory, not {kind}")
    try:
        with open(source, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ConversionError(f"{source}: no such file") from None
    except PermissionError:
        raise ConversionError(f"{source}: cannot read the file (permission denied)") from None
    except OSError as e:
        raise ConversionError(f"{source}: cannot read the file ({e.strerror or e})") from None
