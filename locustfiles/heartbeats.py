"""What the master learns from its workers' Locust heartbeats: which workers went away
(noted in run.json), and each worker's own CPU and memory, written to resources.jsonl as
``role: client`` samples with ``source: locust-heartbeat``."""

from __future__ import annotations

import logging

import gevent
import locust.runners

from tts_knee import runformat

from .clock import wall

log = logging.getLogger("tts_knee")
#: How often the master notes lost workers and samples their heartbeat CPU into resources.jsonl.
WATCH_INTERVAL_S = 1.0
#: How often a Locust process measures its own CPU and memory, which its heartbeats carry.
#: Locust's own 10 s left a worker's first reading 10 s after it started (a short run ended with
#: none: CI saw a 15 s run without one) and every later one up to 10 s behind its step.
#: Locust reads the constant at each reading; set before any runner exists, the first reading
#: comes one second after the worker starts.
locust.runners.CPU_MONITOR_INTERVAL = WATCH_INTERVAL_S


def watch(node) -> None:
    """Master: note workers that went away, and sample every worker's own CPU and memory
    (Locust's heartbeats carry them) into resources.jsonl as role=client."""
    while True:
        gevent.sleep(WATCH_INTERVAL_S)
        run = node.run
        if run is None or run.closed or run.receiver is None or run.run_dir is None:
            continue
        for wid in run.receiver.note_lost():
            log.error("worker %s went away mid-run; its records up to its last batch are kept", wid)
            run.save()
        now = wall()
        lines = [
            runformat.jsonl_bytes(
                runformat.resource_sample(
                    ts=now,
                    host=client.id,
                    role="client",
                    source="locust-heartbeat",
                    proc=runformat.proc_reading(cpu_percent=client.cpu_usage, rss_bytes=client.memory_usage),
                    gpus=[],
                )
            )
            # a worker's first heartbeats come before it has measured itself: nothing to record yet
            for client in node.environment.runner.clients.all
            if client.state != "missing" and client.memory_usage
        ]
        if lines:  # written off the event loop, with the run's other files
            node.disk.append(run.run_dir / runformat.RESOURCES, b"".join(lines))
