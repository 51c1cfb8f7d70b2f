"""Retention, the store's side: what each class of data (config/retention.py) deletes,
in batches that never touch a row in flight, and the store's size by class.

- ``prune.py``  :class:`SqlPruning`, one class at a time, for both SQL stores
- ``sizes.py``  rows and bytes by class (``tether status``), and SQLite's space reclaimed

The loop that calls them is gateway/ops/pruner.py.
"""

from tether.memory.retention.prune import PruneStore, SqlPruning, reduced_payload
from tether.memory.retention.sizes import ClassSize

__all__ = ["ClassSize", "PruneStore", "SqlPruning", "reduced_payload"]
