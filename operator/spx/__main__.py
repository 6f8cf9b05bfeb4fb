"""``python -m spx`` = the ``spx`` command."""

from spx.cli import main

raise SystemExit(main())
