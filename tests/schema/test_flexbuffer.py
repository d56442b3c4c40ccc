"""A custom op's options as FlexBuffer: the bytes TensorFlow 2.21 wrote for the SSD fixture's
TFLite_Detection_PostProcess (recorded from ``from_frozen_graph(..., allow_custom_ops=True)``;
``tests/e2e/test_custom_ops.py`` compares whole files live) and for an op with a string and a type."""

from __future__ import annotations

import pytest

from qconvert.schema.flexbuffer import decode, encode

# TensorFlow 2.21's custom options for the fixture's TFLite_Detection_PostProcess (fast NMS).
_TF_SSD = bytes.fromhex(
    "646574656374696f6e735f7065725f636c61737300685f7363616c65006d61785f636c61737365735f7065725f646574"
    "656374696f6e006d61785f646574656374696f6e73006e6d735f696f755f7468726573686f6c64006e6d735f73636f72"
    "655f7468726573686f6c64006e756d5f636c6173736573007573655f726567756c61725f6e6d7300775f7363616c6500"
    "785f7363616c6500795f7363616c65000ba18d866d5f4e3b30211a130b000000010000000b0000006400000000"
    "00a040010000000a0000009a99193f77cc2b3203000000000000000000a0400000204100002041060e06060e0e066a"
    "0e0e0e372601")
# ...and for MyCustomOp(T=float32, alpha=0.25, count=3, flag=True, mode="fast", _hidden=...).
_TF_MY_OP = bytes.fromhex(
    "5400616c70686100636f756e7400666c6167006d6f646500046661737400051f1e191410050000000100000005000000"
    "000000000000803e030000000100000027000000060e066a14192601")


def test_ssd_options_equal_tensorflows_bytes() -> None:
    entries = [("max_detections", "int", 10), ("max_classes_per_detection", "int", 1),
               ("nms_score_threshold", "float", 9.99999993922529e-09), ("nms_iou_threshold", "float", 0.6000000238418579),
               ("num_classes", "int", 3), ("y_scale", "float", 10.0), ("x_scale", "float", 10.0),
               ("h_scale", "float", 5.0), ("w_scale", "float", 5.0), ("detections_per_class", "int", 100),
               ("use_regular_nms", "bool", False)]
    assert encode(entries) == _TF_SSD  # keys in any order: the map sorts them, as TensorFlow's builder
    assert decode(_TF_SSD)["num_classes"] == 3 and len(decode(_TF_SSD)) == 11


def test_string_and_type_options_equal_tensorflows_bytes() -> None:
    entries = [("T", "type", "float32"), ("alpha", "float", 0.25), ("count", "int", 3), ("flag", "bool", True),
               ("mode", "string", "fast")]
    assert encode(entries) == _TF_MY_OP
    assert decode(_TF_MY_OP) == {"T": 0, "alpha": 0.25, "count": 3, "flag": True, "mode": "fast"}


def test_a_type_tflite_has_no_number_for_is_refused() -> None:
    with pytest.raises(ValueError, match="'T': type 'qint8' is not an int, float, bool, string or TFLite tensor"):
        encode([("T", "type", "qint8")])


def test_decode_of_other_bytes_is_none() -> None:
    assert decode(b"") is None
    assert decode(b"\x01\x02\x03") is None or not isinstance(decode(b"\x01\x02\x03"), dict)
