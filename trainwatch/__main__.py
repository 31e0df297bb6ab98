"""``python -m trainwatch`` is the ``trainwatch`` command."""

from trainwatch.cli import main

raise SystemExit(main())
