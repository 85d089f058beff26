"""`python -m kassette`: the same command as the `kassette` console script."""

from kassette.cli import main

raise SystemExit(main())
