"""A dcgm-exporter that serves but is not marked ready yet: not a failure.

From 4.0.0-4.0.1 dcgm-exporter's /health handler, which the readiness and liveness probes of its chart and of the GPU
Operator ask (httpGet /health on the metrics port, initialDelaySeconds 45), answers 200 whenever its web server runs:
it writes its body and sets no error status (NVIDIA/dcgm-exporter internal/pkg/server/server.go@4.0.0-4.0.1,
MetricsServer.Health; before that release it answered 503 until the first metrics were collected). So an exporter of
such a release whose log says its web server started, that has not restarted, whose log holds no error and for which
the kubelet wrote no failed probe (its ``Unhealthy`` Events) is serving; the kubelet has only not probed it yet (the
probes' initial delay) or the dump caught it between start and probe. Calling that a failure would be a false error
on a healthy node.
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import NodeView
from gpuchain.doctor.evidence import probe_failures
from gpuchain.doctor.pods import PodState
from gpuchain.doctor.releases import image_version, release_of
from gpuchain.kube.objects import Obj

#: The first dcgm-exporter release whose /health answers 200 while its web server runs (server.go@4.0.0-4.0.1).
HEALTH_ANSWERS_OK_FROM = "4.0.0-4.0.1"
#: dcgm-exporter's "Starting webserver" (catalog.yaml).
WEBSERVER_STARTED = "dcgm-exporter.webserver-started"
COMPONENT = "dcgm-exporter"


def exporter_release(pod: Obj) -> str:
    """The dcgm-exporter release ``pod`` runs, its image tag ("" where no container runs NVIDIA's image)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        name, tag = image_version(str(container.get("image", "")))
        if name == COMPONENT:
            return tag
    return ""


def serving_unprobed(view: NodeView, pod: Obj, state: PodState, log: str) -> str:
    """Why an exporter pod that is Running but not ready is serving (its log's start of the web server, in a
    release whose /health always answers), or "" where it may be failing."""
    if state.failing or state.restarts or not state.status.startswith("Running"):
        return ""
    running, first = release_of(exporter_release(pod), COMPONENT), release_of(HEALTH_ANSWERS_OK_FROM, COMPONENT)
    if running is None or first is None or running < first:
        return ""
    started = catalog.find(log, WEBSERVER_STARTED)
    if started is None or catalog.known_error(log) is not None or catalog.unknown_error(log) is not None:
        return ""
    if probe_failures(view, pod):
        return ""
    return (
        f"its web server started ({started.line}) and its /health answers while it runs; the kubelet has not "
        "marked it ready yet"
    )
