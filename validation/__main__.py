"""``python -m validation``: the ``nfd-validate`` console script (see :mod:`validation._cli`)."""

import sys

from ._cli import main

sys.exit(main())
