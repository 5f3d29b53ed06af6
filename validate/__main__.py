"""``python -m validate`` runs the gate CLI."""

import sys

from .cli import main

sys.exit(main())
