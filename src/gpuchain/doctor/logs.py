"""The doctor's log reader: container logs through the `Cluster` port, like every other read."""

from __future__ import annotations

from gpuchain.doctor.snapshot import LogReader
from gpuchain.kube import Cluster, KubeError

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
            return cluster.logs(pod, namespace, container=container, tail_lines=tail_lines, previous=previous) or None
        except KubeError:
            return None

    return read
