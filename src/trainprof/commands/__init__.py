"""The commands: each ``trainprof`` subcommand is a module here with ``main(args) -> int``.

A command runs the pipeline (load, analyse, diagnose) and hands the results to the renderers of
``report/``; ``cli.py`` only parses the arguments and calls ``commands.<name>.main``. Nothing
below this layer imports it (tests/test_layers.py).
"""
