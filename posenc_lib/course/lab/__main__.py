"""``python -m posenc_lib.lab``: the lab's command line (``posenc_lib.lab.cli``)."""

import sys

from .cli import main

sys.exit(main())
