"""The store in process memory: for tests, ``tether chat`` without a file, and as the
baseline the benchmarks measure the durable stores against.

- ``store.py``    :class:`MemoryStore`: every role of :class:`~tether.memory.store.Store`
- ``ops.py``      its operator half: pairings, ``tether status``, dead letters
- ``steps.py``    its memoized steps, and those committed with memory changes
- ``console.py``  its side of the web console's reads
"""

from tether.memory.inmemory.store import MemoryStore

__all__ = ["MemoryStore"]
