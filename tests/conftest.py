"""Test-wide settings. Tests mirror the package (``tests/<package>/test_<module>.py``);
end-to-end oracle tests are in ``tests/e2e/``; corpora and oracle helpers in
``tests/fixtures/`` (importable by their plain names: ``import corpus, oracle``)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))

# Check the IR's invariants after every pass (not only after every stage, the default
# outside --debug), so that a pass that breaks one is named by the failing test.
os.environ.setdefault("QCONVERT_CHECK_EACH_PASS", "1")
