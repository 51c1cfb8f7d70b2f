"""``python -m tether``: the ``tether`` command, for where the console script is not on
``PATH`` (a virtualenv not activated, ``pipx run``, a container's entry point)."""

from tether.gateway.cli import main

raise SystemExit(main())
