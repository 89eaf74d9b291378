"""`python -m trainprof` is the `trainprof` command."""

from trainprof.cli import main

raise SystemExit(main())
