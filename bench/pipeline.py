"""Pipeline throughput and accept→sent latency: durable SQLite file vs in-memory store.

10,000 events over 100 conversations through the full gateway (inbox, dispatcher,
pipeline, checkpoint, outbox) with the echo agent and the loopback adapter, fed in
batches of 100 as a poller would, with the dispatcher's backpressure. The in-memory
store run is the baseline measured in the same process; the ratio is what durability
costs. Logs go to a file at info level, as in production. Each run starts from a
collected heap, so the first run's garbage is not billed to the second.

The SQLite run is repeated (``--repeat``, the median reported), interleaved with a
run on a SQLite file whose recall-index triggers were dropped before it starts
(docs/recall.md): ``indexed_over_unindexed`` is what indexing every turn for search
costs the pipeline (target: at least 0.9). Each repeat is a pair run back to back (which
goes first alternates), and the ratio is the median of the pairs' ratios: a pair shares
the machine's load of its moment, so a busy minute moves both sides, not the ratio, where
a ratio of two medians would pair runs from different minutes.

    python bench/pipeline.py [--events N] [--conversations N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tether.adapters.base import Sent
from tether.adapters.loopback import LoopbackAdapter
from tether.config import load_text
from tether.events import OutMessage
from tether.gateway.app import Gateway
from tether.gateway.ops import logs, runtime
from tether.gateway.ops.runtime import settle_heap


class TimedAdapter(LoopbackAdapter):
    """Records when each reply reached the platform."""

    def __init__(self) -> None:
        super().__init__()
        self.sent_at: dict[str, float] = {}
        self.done = asyncio.Event()
        self.expected = 0

    async def send(self, message: OutMessage) -> Sent:
        self.sent_at[message.key.rsplit("#", 1)[0]] = time.perf_counter()
        if len(self.sent_at) >= self.expected:
            self.done.set()
        return Sent(platform_id=str(len(self.sent_at)))


async def run_once(store_url: str, events: int, conversations: int) -> dict[str, Any]:
    settings = load_text(
        json.dumps(
            {
                "memory": {"store": store_url},
                "http": {"enabled": False},
                "platforms": {"console": {"enabled": False}},
                "pipeline": {"concurrency": 100, "queue_size": 2000},
                "outbox": {"concurrency": 100},
                "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
            }
        )
    )
    adapter = TimedAdapter()
    adapter.expected = events
    gateway = Gateway(settings, {"loopback": adapter})
    await gateway.start()
    settle_heap()  # as `tether run` does after start
    accepted_at: dict[str, float] = {}
    cpu, children = time.process_time(), _children_cpu()
    started = time.perf_counter()
    batch = 100
    for first in range(0, events, batch):
        chunk = [
            adapter.event(f"message {n}", chat=str(n % conversations), key=f"bench:{n}")
            for n in range(first, min(first + batch, events))
        ]
        now = time.perf_counter()
        for event in chunk:
            accepted_at[event.key] = now
        await adapter.deliver(*chunk)
    await asyncio.wait_for(adapter.done.wait(), 300)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    await gateway.stop()  # the SQLite writer exits: its CPU time is now the children's
    writer = _children_cpu() - children
    latencies = sorted((adapter.sent_at[k] - accepted_at[k]) * 1000 for k in accepted_at)
    return {
        "events": events,
        "seconds": round(elapsed, 3),
        "events_per_s": round(events / elapsed),
        "latency_ms_p50": round(statistics.median(latencies), 2),
        "latency_ms_p99": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        "cpu_s": round(cpu, 3),
        "writer_cpu_s": round(writer, 3),
        "events_per_cpu_s": round(events / (cpu + writer)),
    }


async def unindexed(path: Path) -> None:
    """A migrated SQLite store at ``path`` whose turns are not indexed for search: its
    ``messages_fts`` a plain table, so the writer's indexing statement (and the delete
    and update triggers') copy a row's text and tokenize nothing."""
    from tether.memory.stores import open_store

    store = open_store(f"sqlite:///{path}")
    await store.open()
    await store.close()
    with sqlite3.connect(path) as db:
        for trigger in ("messages_fts_removed", "messages_fts_changed"):
            db.execute(f"DROP TRIGGER {trigger}")
        db.execute("DROP TABLE messages_fts")
        db.execute("CREATE TABLE messages_fts (text TEXT)")


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput (its own figures, not a blend of several runs)."""
    return sorted(runs, key=lambda run: run["events_per_s"])[len(runs) // 2]


def pair_ratio(pairs: list[tuple[dict[str, Any], dict[str, Any]]], figure: str) -> float:
    """The median over the pairs of indexed ``figure`` / unindexed ``figure``."""
    return round(statistics.median(i[figure] / u[figure] for i, u in pairs), 3)


def _children_cpu() -> float:
    """CPU seconds of the child processes that ended (the SQLite writer) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each SQLite kind")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "bench.log"
        with log_path.open("w", encoding="utf-8") as log_file:
            logs.configure("info", "json", stream=log_file)
            memory = runtime.run(run_once("memory://", args.events, args.conversations))
            durable_runs: list[dict[str, Any]] = []
            bare_runs: list[dict[str, Any]] = []
            for n in range(args.repeat):  # interleaved, turn about: neither always first
                bare_path = Path(tmp) / f"bare{n}.db"
                runtime.run(unindexed(bare_path))
                urls = [(durable_runs, f"sqlite:///{tmp}/bench{n}.db")]
                urls.append((bare_runs, f"sqlite:///{bare_path}"))
                for runs, url in urls if n % 2 == 0 else urls[::-1]:
                    runs.append(runtime.run(run_once(url, args.events, args.conversations)))
            durable, bare = median_run(durable_runs), median_run(bare_runs)
            pairs = list(zip(durable_runs, bare_runs, strict=True))
        log_lines = len(log_path.read_text(encoding="utf-8").splitlines())
    print(
        json.dumps(
            {
                "benchmark": "pipeline",
                "conversations": args.conversations,
                "agent": "echo",
                "durable_sqlite": durable,
                "in_memory": memory,
                "durable_sqlite_unindexed": bare,
                "indexed_over_unindexed": pair_ratio(pairs, "events_per_s"),
                "indexed_over_unindexed_per_cpu_s": pair_ratio(pairs, "events_per_cpu_s"),
                "indexed_over_unindexed_pairs": [
                    round(i["events_per_s"] / u["events_per_s"], 3) for i, u in pairs
                ],
                "durable_over_memory": round(durable["events_per_s"] / memory["events_per_s"], 3),
                # CPU work per event, writer included: what durability costs, whatever
                # else runs on the machine (wall-clock ratios sink when the writer has
                # to wait for a core).
                "durable_over_memory_per_cpu_s": round(
                    durable["events_per_cpu_s"] / memory["events_per_cpu_s"], 3
                ),
                "loop": runtime.loop_name(),
                "log_lines": log_lines,
                "target": {
                    "durable_events_per_s": 8000,
                    "durable_over_memory": 0.85,
                    "indexed_over_unindexed": 0.9,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
