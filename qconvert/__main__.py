import sys

from qconvert.cli import main

sys.exit(main())
