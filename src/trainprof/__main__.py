"""`python -m trainprof` is the `trainprof` command."""

from trainprof.cli import console_main

raise SystemExit(console_main())
