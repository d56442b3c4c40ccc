"""Test-wide settings."""

import os

# Check the IR's invariants after every pass (not only after every stage, the default
# outside --debug), so that a pass that breaks one is named by the failing test.
os.environ.setdefault("QCONVERT_CHECK_EACH_PASS", "1")
