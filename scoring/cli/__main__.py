"""`python -m scoring.cli ...` is `safevla ...`."""

from scoring.cli.main import main

raise SystemExit(main())
