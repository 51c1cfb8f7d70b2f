"""What the SQLite and PostgreSQL stores share, written once.

- ``statements.py``  the statements both run (placeholders rewritten for PostgreSQL)
- ``rows.py``        the column lists they select and how a row becomes a record
- ``store.py``       :class:`SqlStore`: every read, and every write made the same way
- ``console.py``     the web console's reads and fact edits (a mixin of SqlStore)
"""
