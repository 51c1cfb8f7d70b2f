"""Durable state: what the gateway remembers, behind one store per deployment.

Where things are:

- ``records.py``   the rows (InboxRow, OutboxRow, Turn, Fact, Usage, DeadLetter, …)
- ``roles.py``     one protocol per role of an event's path: inbox (with cursors and lane
                   locks), steps, outbox, conversation memory, blobs, reminders; a
                   consumer types against the role it uses
- ``operator.py``  the roles that serve the operator: pairing, reporting, the console
- ``store.py``     ``Store``: every role plus open/close/ping — what an implementation is
- ``stores.py``    ``open_store(url)``: a URL to one of the implementations below
- ``inmemory/``    the store in a dict (tests, ``tether chat`` without a file)
- ``sql/``         the one SQL vocabulary both SQL stores share: statements, column
                   lists and row decoding, the reads and shared writes, the console's
- ``sqlite/``      the embedded default: schema, the writer link, the writer process
- ``postgres/``    several instances: schema and store on asyncpg
- ``conversation.py``, ``compaction.py``, ``prompt.py``, ``tokens.py``  conversation
                   memory built on the store: history windows, summaries, token counts

Nothing here imports the gateway or the adapters: they build on this, not the reverse.
"""
