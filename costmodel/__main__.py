"""``python -m costmodel`` runs the CLI."""

from .cli import main

raise SystemExit(main())
