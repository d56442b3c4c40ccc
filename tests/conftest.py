"""Test-wide settings. Tests mirror the package (``tests/<package>/test_<module>.py``);
end-to-end oracle tests are in ``tests/e2e/``; corpora and oracle helpers in
``tests/fixtures/`` (importable by their plain names: ``import corpus, oracle``)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))

# Check the IR's invariants after every pass (not only after every stage, the default
# outside --debug), so that a pass that breaks one is named by the failing test.
os.environ.setdefault("QCONVERT_CHECK_EACH_PASS", "1")

# Calibration runs our float kernels, whose BLAS products round differently with each
# OpenBLAS kernel family (measured: on an AVX-512 CPU OpenBLAS picks its SkylakeX kernels
# and 14 of the 20 calibrated entries of tests/fixtures/byte_identity.json get other
# last-ulp ranges, hence other bytes; with the Haswell or Zen kernels all 20 match).
# The AVX2 "Haswell" kernels run on every x86-64 CI machine of the last decade, so the
# suite pins them; it has to be set before NumPy loads OpenBLAS. Other BLAS ignore it.
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")
