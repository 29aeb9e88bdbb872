"""``python -m halide_buffer``: see :mod:`halide_buffer.cli`."""

import sys

from .cli import main

sys.exit(main())
