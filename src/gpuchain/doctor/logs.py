"""The doctor's readers of what pods say: container logs and the exporters' scrapes, through the
`Cluster` port like every other read."""

from __future__ import annotations

from gpuchain.doctor.snapshot import LogReader, Scraper
from gpuchain.kube import Cluster, KubeError
from gpuchain.operator.operands import EXPORTER_PORT

TAIL_LINES = 50


def cluster_log_reader(cluster: Cluster, tail_lines: int = TAIL_LINES) -> LogReader:
    """A LogReader over ``cluster.logs`` (``kubectl logs --tail``), each read counted as verb ``logs``.

    By default the current instance: a container in CrashLoopBackOff is waiting, so the API
    answers with the run that just crashed, whose failure is what the doctor quotes. ``previous``
    (``kubectl logs --previous``) is for a container that restarted and runs again, whose current
    log is only the fresh start. A log the API cannot give (pod gone, container unknown, no
    previous run) reads as None, so one missing log never stops the diagnosis.
    """

    def read(namespace: str, pod: str, container: str, previous: bool = False) -> str | None:
        try:
            return (
                cluster.logs(pod, namespace=namespace, container=container, tail_lines=tail_lines, previous=previous)
                or None
            )
        except KubeError:
            return None

    return read


def cluster_scraper(cluster: Cluster, port: int = EXPORTER_PORT) -> Scraper:
    """A Scraper over ``cluster.pod_proxy_get``: the exporter pod's ``/metrics`` on its port (9400),
    each read counted as verb ``proxy``. A pod the proxy cannot reach reads as None, so one silent
    exporter never stops the diagnosis (its pod's own state is judged as before)."""

    def read(namespace: str, pod: str) -> str | None:
        try:
            return cluster.pod_proxy_get(pod, namespace=namespace, port=port, path="metrics") or None
        except KubeError:
            return None

    return read
