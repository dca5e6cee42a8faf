"""``python -m promem_fast.cli``: the same as the ``promem`` command."""

import sys

from promem_fast.cli import main

sys.exit(main())
