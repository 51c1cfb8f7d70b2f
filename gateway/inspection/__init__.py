"""The CLI's commands that look into the store, a module each (gateway/cli.py wires them).

- :mod:`.store`: ``status``, ``pair``, ``jobs``, ``dead``, and how each command opens
  the configured store on its own (``_on_store``).
- :mod:`.waits`: ``approvals``. :mod:`.tasks`: ``tasks``. :mod:`.search`: ``search``.
- :mod:`.people`: ``who``. :mod:`.erasure`: ``forget``. :mod:`.export`: ``export``.
- :mod:`.backup`: ``backup``, ``backup --check`` and ``restore``.

Each opens the store beside a running gateway or without one (PostgreSQL, and SQLite's
WAL, let several processes read), does one thing and closes it; what it changes is
picked up by the running gateway's sweep.
"""
