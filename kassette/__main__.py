"""`python -m kassette`: the same command as the `kassette` console script."""

from kassette._cli import main

raise SystemExit(main())
