"""``python -m node.cli ...``: the `gavel` command."""
import sys

from . import main

sys.exit(main())
