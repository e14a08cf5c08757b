"""Reading container logs on a live cluster (the Cluster port has no log verb; this is the one edge that does)."""

from __future__ import annotations

from typing import Any

from lightkube import ApiError, Client, KubeConfig

from gpuchain.doctor.snapshot import LogReader

TAIL_LINES = 50


def kubeconfig(path: str | None = None, context: str | None = None) -> KubeConfig:
    """The kubeconfig to use: a file, else in-cluster or $KUBECONFIG/~/.kube/config; ``context`` picks one."""
    config = KubeConfig.from_file(path) if path else KubeConfig.from_env()
    if context:
        if context not in (config.contexts or {}):
            raise ValueError(f"no context {context!r} in the kubeconfig (have: {', '.join(config.contexts or {})})")
        config.current_context = context
    return config


def live_log_reader(config: KubeConfig, tail_lines: int = TAIL_LINES) -> LogReader:
    """A LogReader over the API's pod log endpoint (``kubectl logs --tail``).

    lightkube reads the current container only (no ``--previous``); a crash-looping container's
    current run prints the same failure, and its last run is usually in
    ``lastState.terminated.message`` already.
    """
    client: Any = Client(config)

    def read(namespace: str, pod: str, container: str) -> str | None:
        try:
            return "".join(client.log(pod, namespace=namespace, container=container, tail_lines=tail_lines)) or None
        except ApiError:
            return None

    return read
