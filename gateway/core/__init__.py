"""The durable engine: every event's way from the inbox to its checkpoint and its replies.

- ``inbox.py``       the front door: adapters' events are durable when ``accept`` returns
- ``throttle.py``    the per-sender flood limit, decided at the inbox on new events only
- ``dispatcher.py``  one ordered lane per conversation, lanes side by side
- ``lanes.py``, ``slots.py``  ordered queues per key, and a cheap concurrency limit
- ``pipeline.py``    one event's life: observe → work → checkpoint, or retry / dead
- ``outbox.py``      a reply is a committed row first and a platform call second
- ``edits.py``, ``media.py``  rows that edit a message; rows that carry files
- ``stop.py``        ``/stop``'s mechanism: the running turn of each conversation
- ``transcript.py``  an event's tool calls read back from its steps (dead letters)

Nothing here knows an agent, a tool or a platform by name: the pipeline runs whatever
handler the router resolves, and asks each adapter for its platform's facts.
"""
