"""The live TUI (``trainwatch PATH``).

Entry points: :func:`trainwatch.tui.app.make_app` (the one factory, used by the CLI and the
tests) with a :class:`trainwatch.tui.config.AppConfig`, and
:func:`trainwatch.tui.once.render_once` for ``--once``. Nothing outside this package imports it.
"""
