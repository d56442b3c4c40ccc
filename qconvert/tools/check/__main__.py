"""The child process of ``qconvert check``'s runs: ``python -m qconvert.tools.check --worker REQUEST``
(``runners.run_child`` starts it; ``runners.worker`` does the work)."""

from __future__ import annotations

import json
import sys

from qconvert.tools.check.runners import worker

if len(sys.argv) == 3 and sys.argv[1] == "--worker":
    worker(json.loads(sys.argv[2]))
