"""``python -m costmodel`` runs the CLI (through the entry point that handles Ctrl-C before the imports)."""

try:
    from costmodel_entry import main
except ModuleNotFoundError:  # a checkout on sys.path without the top-level entry module: the CLI directly
    from costmodel.cli import main

raise SystemExit(main())
