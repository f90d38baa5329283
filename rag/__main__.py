"""``python -m rag``: the ``rag`` command (:func:`rag.cli.main`)."""

from rag.cli import main

raise SystemExit(main())
