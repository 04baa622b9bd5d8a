# SPDX-License-Identifier: MIT
"""`python -m fatune.native [build [-v]]` (a module of its own, so that
running it does not import fatune.native a second time)."""
import sys

from . import _main

sys.exit(_main(sys.argv[1:]))
