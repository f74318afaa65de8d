"""``python -m chatfmt.cli``: the same as the ``chatfmt`` command."""

import sys

from .main import main

sys.exit(main())
