"""``python -m spx.tools.dashboard``: print, write or check the dashboard JSON."""

from spx.tools.dashboard import main

raise SystemExit(main())
