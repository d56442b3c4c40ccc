"""The stage this package holds: ``calibrate`` (ranges of a float graph from samples or a ranges
file). Its own module, so that ``qconvert run``, which reads samples with ``data``, does not
load the calibrator."""

from __future__ import annotations

from qconvert.calibration.calibrate import calibrate
from qconvert.ir.passes import Stage

CALIBRATE = Stage("calibrate", "calibration", "float graphs: ranges from --calibration-data / --ranges-file",
                  (calibrate,))
