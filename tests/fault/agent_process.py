"""One component's API loop in a process of its own, so a test can read what it costs.

    python agent_process.py COMPONENT URL NODE CA

COMPONENT is the loop, run as its command runs it (under ``supervise``), against ``URL`` (the
fault proxy, plain HTTP, no credentials). Its client is configured as an agent's in a cluster is,
with the cluster's CA (``CA``, a file) to trust: what a client costs to make depends on it (a
client without a CA loads the whole system trust store, 20 ms of CPU, for every watch).

- ``node-watch``: the device plugin's and GFD's Node watch (``NodeLabelWatch.changes``, which the
  repair loop's quarantine list rides on);
- ``quarantine``: the DRA plugin's own Node watch (``QuarantineFollower.follow``);
- ``mig-watch``: the MIG manager's Node and Pod watches (``MigManager._watch``);
- ``operator``: the operator (kopf's watches and the reconcile) in namespace ``gpu-operator``.

Each record its loggers emit at INFO and up is written to stderr, as the commands log, and
counted. On SIGUSR1 the process prints one JSON line to stdout: ``cpu``, the CPU-seconds it has
used (user + system, all threads), and ``logs``, the records so far.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from gpuchain.common.supervise import supervise
from gpuchain.deviceplugin.nodeconfig import NodeLabelWatch
from gpuchain.deviceplugin.quarantine import QuarantineFollower
from gpuchain.gpu.sim import SimBackend
from gpuchain.kube import NODE, POD, LiveCluster
from gpuchain.mig.config import default_config
from gpuchain.mig.manager import MigManager
from gpuchain.operator.runtime import RuntimeConfig, run


class Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1


def loops(component: str, url: str, node: str, ca: str) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
    """(name, loop) of what ``component`` runs forever."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url, "certificate-authority": ca}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    # A process the test ends with SIGTERM runs no cleanup: the file is gone once the client has read it.
    with tempfile.TemporaryDirectory() as scratch:
        kubeconfig = Path(scratch) / "kubeconfig"
        kubeconfig.write_text(json.dumps(config))
        cluster = LiveCluster.from_kubeconfig(str(kubeconfig))
    if component == "node-watch":
        watch = NodeLabelWatch(cluster, node_name=node)

        async def labels() -> None:
            async for _value in watch.changes(None):
                pass

        return [("device plugin: node watch", labels)]
    if component == "quarantine":
        return [
            ("dra-plugin: quarantine watch", QuarantineFollower(cluster, node_name=node, apply=lambda _q: None).follow)
        ]
    if component == "mig-watch":
        manager = MigManager(
            cluster, backend=SimBackend.from_preset("h100-80gb-x8"), node=node, config=default_config()
        )
        wake = asyncio.Event()
        return [
            ("MIG manager: node watch", lambda: manager._watch(NODE, f"metadata.name={node}", wake)),
            ("MIG manager: pod watch", lambda: manager._watch(POD, f"spec.nodeName={node}", wake)),
        ]
    if component == "operator":
        config = RuntimeConfig(namespace="gpu-operator", min_interval=0.5, resync=600, server=url)
        return [("operator", lambda: run(cluster, config=config))]
    raise SystemExit(f"unknown component {component!r}")


async def main(component: str, url: str, node: str, ca: str) -> None:
    counter = Counter()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger().addHandler(counter)

    def report() -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print(json.dumps({"cpu": usage.ru_utime + usage.ru_stime, "logs": counter.records}), flush=True)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, report)
    await asyncio.gather(*(supervise(name, run=loop) for name, loop in loops(component, url, node, ca)))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
