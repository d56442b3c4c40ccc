"""``qconvert run --rounding``: MultiplyByQuantizedMultiplier's rounding modes, by hand.

``real = m · 2**(shift - 31)``. double (TFLite's default build): SaturatingRoundingDoublingHighMul
(ties up, C division), then RoundingDivideByPOT (ties away from zero); single (TFLITE_SINGLE_ROUNDING,
CMSIS-NN; TVM's UPWARD): one rounding, ties towards +inf; tonearest (TVM): one rounding, ties away
from zero. Every expected value below is worked out in the comment beside it.
"""

from __future__ import annotations

import numpy as np
import pytest

from qconvert.runtime.int_math import mbqm, rounding

HALF = 1 << 30  # m = 2**30 is 0.5 at shift 0
CASES = [
    # (x, m, shift, double, single/upward, tonearest)
    (3, HALF, 0, 2, 2, 2),        # 1.5: SRDHM (3·2^30 + 2^30) >> 31 = 2; single (3·2^30 + 2^30) >> 31 = 2
    (-3, HALF, 0, -1, -1, -2),    # -1.5: SRDHM trunc((-3·2^30 + 1 - 2^30) / 2^31) = -1; single floor(-1.5 + .5) = -1;
                                  # tonearest -2
    (5, HALF, 0, 3, 3, 3),        # 2.5 → 3 in all (SRDHM ties up; single ties up; away from zero)
    (-5, HALF, 0, -2, -2, -3),    # -2.5: SRDHM → -2; single → -2; tonearest → -3
    (1, (1 << 31) - 1, -1, 1, 0, 0),  # 0.4999999998: SRDHM(1, 2^31-1) = 1, then 1/2 = 0.5 → 1 (double rounding);
                                      # one rounding gives 0
    (6, HALF, -1, 2, 2, 2),       # 1.5 (0.25·6): SRDHM 3, RDPOT(3, 1) = 1.5 → 2; single (6·2^30 + 2^31) >> 32 = 2
    (-6, HALF, -1, -2, -1, -2),   # -1.5: SRDHM -3, RDPOT → -2 (away); single → -1 (up); tonearest → -2
    (7, 3 << 29, 1, 11, 11, 11),  # 7·0.75·2 = 10.5, a left shift: SRDHM(14, 0.75·2^31) = 10.5 → 11; single
                                  # (7·1.5·2^30 + 2^29) >> 30 = 11
    (-7, 3 << 29, 1, -10, -10, -11),  # -10.5: SRDHM trunc((-21·2^30 + 1 - 2^30) / 2^31) = -10; single -10;
                                      # tonearest -11
]


@pytest.mark.parametrize("x, m, shift, double, single, tonearest", CASES)
def test_roundings_by_hand(x: int, m: int, shift: int, double: int, single: int, tonearest: int) -> None:
    for mode, want in (("double", double), ("single", single), ("upward", single), ("tonearest", tonearest)):
        with rounding(mode):
            assert int(mbqm(np.int64(x), m, shift)) == want, mode
    assert int(mbqm(np.int64(x), m, shift)) == double  # the default, outside any context


def test_unknown_rounding_is_refused() -> None:
    with pytest.raises(ValueError, match="choose double"), rounding("nearest-even"):
        pass


def test_command_line_takes_the_runtime_and_rounding(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Each mode runs the example model; the outputs stay close to the default and the
    single-rounding ones differ from it somewhere on 64 samples (or the option would be inert)."""
    import subprocess
    import sys
    from pathlib import Path

    from qconvert.api import convert_bytes

    root = Path(__file__).resolve().parents[2]
    model = tmp_path / "digits.tflite"
    model.write_bytes(convert_bytes(root / "models" / "digits_qat.pb", input_ranges={"input": (-1.0, 1.0)}))
    np.save(tmp_path / "x.npy", np.random.default_rng(0).integers(-128, 128, (64, 1, 8, 8, 1)).astype(np.int8))
    outs = {}
    for args in ([], ["--runtime", "tflm"], ["--rounding", "single"], ["--rounding", "tonearest"]):
        out = tmp_path / f"o{len(outs)}.npz"
        r = subprocess.run([sys.executable, "-m", "qconvert", "run", str(model),
                            "--input", str(tmp_path / "x.npy"), "-o", str(out), *args],
                           capture_output=True, text=True, cwd=root)
        assert r.returncode == 0, r.stderr
        with np.load(out) as z:
            outs[" ".join(args)] = {k: z[k].astype(int) for k in z.files}
    base = outs[""]
    for key, o in outs.items():
        # the output is a SOFTMAX (1/256): a logit 1 LSB apart moves it by up to 7 here (measured)
        assert all(np.abs(o[k] - base[k]).max() <= 8 for k in base), key
    assert any((outs["--rounding single"][k] != base[k]).any() for k in base)
    r = subprocess.run([sys.executable, "-m", "qconvert", "run", str(model),
                        "--input", str(tmp_path / "x.npy"), "--rounding", "even"], capture_output=True, text=True,
                       cwd=root)
    assert r.returncode == 2
