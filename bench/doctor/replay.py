"""A replay API server: list responses of a simulated cluster, shaped as a kube-apiserver sends them.

The live doctor bench (`bench.doctor.live`) needs list responses the size and shape of a real
cluster's, served over real HTTP, so that what a live client pays (reading and decoding the JSON)
is measured, not guessed. The objects come from the simulator (`gpuchain.sim`: a GPU Operator
cluster with its operand pods and GPU workloads, about 7.6 pods per node); each is then given what
the simulator leaves out and a real kube-apiserver returns:

- ``metadata.managedFields``: one entry by the creator (a controller, ``Update``) over metadata
  and spec, one by the kubelet or controller over status (``subresource: status``), each a
  FieldsV1 tree built from the object's own fields the way the API server encodes them (``f:``
  per field, ``k:{...}`` per keyed list element, ``.`` for the element itself): on a real cluster
  it is a third to a half of a pod's JSON;
- the defaults the API server fills in on create (kubernetes pkg/apis/core/v1/defaults.go:
  ``terminationMessagePath``, ``dnsPolicy``, ``schedulerName``, ...; the ServiceAccount admission
  plugin's ``kube-api-access-*`` projected volume and mount; DefaultTolerationSeconds' two
  tolerations) and the kubelet's status fields (``podIP(s)``, ``qosClass``, ``startTime``,
  condition timestamps, ``imageID``/``containerID``) where the simulator left them out;
- for Nodes, the kubelet's ``status.images`` (up to 50 images, each with its digest and tag), the
  addresses and ``daemonEndpoints``;
- items carry no apiVersion/kind (the list names them once), except custom resources.

Every object is shaped and encoded once, at start; every response is put together once, on its
first request (the recording), and sent from that copy afterwards (the replay). As the API server
does (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/writers.go: ``defaultGzipThresholdBytes
= 128 * 1024``, ``defaultGzipContentEncodingLevel = 1``), a body over 128 KiB goes gzip-compressed
at level 1 to a client whose Accept-Encoding names gzip (httpx, under lightkube, asks for it), so
the client pays for inflating it; the compressed copy is made once too, on its first request. ``limit`` and
``continue`` page as the API server does (``continue`` token, ``remainingItemCount``); label and
field selectors are the in-memory cluster's, which the contract tests hold to the real server's.
``GET /_replay/requests`` answers (and forgets) the list requests served since it was last asked,
so the bench can fetch the same bytes without decoding them.

    .venv/bin/python -m bench.doctor.replay --nodes 1000   # prints "replaying on http://127.0.0.1:PORT"
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bench.doctor.run import scenario_text
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER
from gpuchain.kube import (
    CLUSTER_POLICY,
    CONFIGMAP,
    DAEMONSET,
    EVENT,
    NODE,
    POD,
    RUNTIME_CLASS,
    MemoryCluster,
)
from gpuchain.kube.errors import NotFoundError, UnknownKindError
from gpuchain.kube.kinds import Kind
from gpuchain.kube.objects import Obj
from gpuchain.sim import build, parse_scenario

#: What the doctor lists, by URL path segment (group, plural).
KINDS = {
    (k.group, k.plural): k
    for k in (
        CLUSTER_POLICY,
        NVIDIA_CLUSTER_POLICY,
        NODE,
        POD,
        DAEMONSET,
        NVIDIA_DRIVER,
        CONFIGMAP,
        RUNTIME_CLASS,
        EVENT,
    )
}
BUILT_IN_GROUPS = ("", "apps", "node.k8s.io", "events.k8s.io", "policy")
MERGE_KEYS = ("name", "type", "key", "containerPort", "mountPath", "devicePath", "ip", "address", "uid")
CREATED = "2026-06-05T17:58:12Z"
STARTED = "2026-06-05T18:00:00Z"


def fields_v1(value: Any) -> Any:
    """The FieldsV1 set of ``value``: ``f:<key>`` per map key, ``k:{"<merge key>":...}`` per element
    of a list of keyed maps, ``{}`` for a scalar or an atomic list, ``.`` on every map and keyed
    element (the element itself is owned too)."""
    if isinstance(value, dict):
        return {".": {}, **{f"f:{k}": fields_v1(v) for k, v in value.items()}} if value else {}
    if isinstance(value, list) and value and all(isinstance(v, dict) and _merge_key(v) for v in value):
        return {
            f"k:{json.dumps({_merge_key(e): e[_merge_key(e)]}, separators=(',', ':'))}": fields_v1(e) for e in value
        }
    return {}


def _merge_key(element: Obj) -> str:
    """The field that names a list element (a list whose elements have none is atomic)."""
    return next((k for k in MERGE_KEYS if k in element), "")


def managed_fields(obj: Obj, manager: str, status_manager: str) -> list[Obj]:
    """The two managedFields entries an object that a controller created and another keeps the
    status of carries."""
    meta = {
        k: v for k, v in obj["metadata"].items() if k in ("labels", "annotations", "ownerReferences", "generateName")
    }
    spec_part = {
        "f:metadata": fields_v1(meta),
        **{f"f:{k}": fields_v1(v) for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")},
    }
    entries = [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": CREATED,
            "fieldsType": "FieldsV1",
            "fieldsV1": spec_part,
        },
    ]
    if obj.get("status"):
        entries.append(
            {
                "manager": status_manager,
                "operation": "Update",
                "apiVersion": "v1",
                "time": STARTED,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": fields_v1(obj["status"])},
                "subresource": "status",
            }
        )
    return entries


def _uid(text: str) -> str:
    """A stable UUID-shaped uid for ``text``."""
    h = hashlib.md5(text.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _pod_defaults(pod: Obj, index: int) -> None:
    """What the API server's defaulting and admission, and the kubelet, add to a pod."""
    spec, status, meta = pod.setdefault("spec", {}), pod.setdefault("status", {}), pod["metadata"]
    token = f"kube-api-access-{_uid(meta['name'])[:5]}"
    for c in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        c.setdefault("imagePullPolicy", "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})
        c["volumeMounts"] = [
            *c.get("volumeMounts", []),
            {"name": token, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ]
    spec["volumes"] = [
        *spec.get("volumes", []),
        {
            "name": token,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                }
                            ]
                        }
                    },
                ],
            },
        },
    ]
    for key, value in (
        ("restartPolicy", "Always"),
        ("terminationGracePeriodSeconds", 30),
        ("dnsPolicy", "ClusterFirst"),
        ("serviceAccountName", "default"),
        ("securityContext", {}),
        ("schedulerName", "default-scheduler"),
        ("priority", 0),
        ("enableServiceLinks", True),
        ("preemptionPolicy", "PreemptLowerPriority"),
    ):
        spec.setdefault(key, value)
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec["tolerations"] = [
        *spec.get("tolerations", []),
        *(
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ),
    ]
    meta.setdefault("generateName", meta["name"].rsplit("-", 1)[0] + "-")
    if status.get("phase") in ("Running", "Pending") and spec.get("nodeName"):
        ip = f"10.{(index >> 16) & 255}.{(index >> 8) & 255}.{index & 255}"
        status.setdefault("podIP", ip)
        status.setdefault("podIPs", [{"ip": ip}])
        status.setdefault("startTime", STARTED)
    status.setdefault("qosClass", "BestEffort")
    for cond in status.get("conditions", []):
        cond.setdefault("lastProbeTime", None)
        cond.setdefault("lastTransitionTime", STARTED)
    for cs in [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]:
        image = next(
            (
                c.get("image", "")
                for c in [*spec.get("initContainers", []), *spec.get("containers", [])]
                if c["name"] == cs["name"]
            ),
            "",
        )
        cs.setdefault("image", image)
        cs.setdefault("imageID", f"{image.split(':')[0]}@sha256:{hashlib.sha256(image.encode()).hexdigest()}")
        cs.setdefault("containerID", f"containerd://{hashlib.sha256((meta['name'] + cs['name']).encode()).hexdigest()}")
        cs.setdefault("lastState", {})


def _node_defaults(node: Obj, index: int) -> None:
    """What a kubelet reports about its node besides capacity and conditions."""
    status = node.setdefault("status", {})
    name = node["metadata"]["name"]
    status.setdefault(
        "addresses",
        [
            {"type": "InternalIP", "address": f"10.1.{index >> 8 & 255}.{index & 255}"},
            {"type": "Hostname", "address": name},
        ],
    )
    status.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 10250}})
    for cond in status.get("conditions", []):
        cond.setdefault("lastHeartbeatTime", STARTED)
        cond.setdefault("lastTransitionTime", CREATED)
    status.setdefault(
        "images",
        [
            {
                "names": [
                    f"registry.example.com/team-{i}/image-{i}@sha256:{hashlib.sha256(str(i).encode()).hexdigest()}",
                    f"registry.example.com/team-{i}/image-{i}:v1.{i}.0",
                ],
                "sizeBytes": 100_000_000 + 7_919 * i,
            }
            for i in range(50)
        ],
    )
    node.setdefault("spec", {}).setdefault("podCIDR", f"10.{index >> 8 & 255}.{index & 255}.0/24")


def apiserver_item(obj: Obj, kind: Kind, index: int) -> Obj:
    """``obj`` as a kube-apiserver lists it (module docstring); ``obj`` is not changed."""
    item: Obj = json.loads(json.dumps(obj))
    meta = item.setdefault("metadata", {})
    meta.setdefault("uid", _uid(f"{meta.get('namespace')}/{meta.get('name')}/{kind.plural}"))
    meta.setdefault("resourceVersion", str(1000 + index))
    meta.setdefault("creationTimestamp", CREATED)
    if kind == POD:
        _pod_defaults(item, index)
        manager, status_manager = "kube-controller-manager", "kubelet"
    elif kind == NODE:
        _node_defaults(item, index)
        manager, status_manager = "kubelet", "kubelet"
    else:
        manager, status_manager = "gpu-operator", "gpu-operator"
    meta["managedFields"] = managed_fields(item, manager, status_manager)
    if kind.group in BUILT_IN_GROUPS:
        item.pop("apiVersion", None)
        item.pop("kind", None)
    return item


def _key(obj: Obj) -> tuple[str, str]:
    """(namespace, name) of an object."""
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


def _status(code: int, reason: str, message: str) -> bytes:
    """A metav1.Status body."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return json.dumps(body).encode()


#: The API server's gzip: bodies over this many bytes, at this level (see the module docstring).
GZIP_THRESHOLD = 128 * 1024
GZIP_LEVEL = 1


class Recording:
    """The cluster's list responses, each computed on its first request and replayed afterwards."""

    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster
        #: every object the doctor may list, shaped and encoded once, up front (a first request
        #: that had to shape 75,000 pods would outlast a client's timeout)
        self._encoded: dict[Kind, dict[tuple[str, str], bytes]] = {}
        for kind in KINDS.values():
            try:
                objs = cluster.list_readonly(kind)
            except (NotFoundError, UnknownKindError):
                continue
            self._encoded[kind] = {
                _key(o): json.dumps(apiserver_item(o, kind, i), separators=(",", ":")).encode()
                for i, o in enumerate(objs)
            }
        self._pages: dict[str, tuple[int, bytes]] = {}
        self._gzipped: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.served: list[str] = []

    def _route(self, path: str) -> tuple[Kind, str | None] | None:
        """The kind and namespace a list URL path names."""
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "v1"]:
            group, rest = "", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, rest = parts[1], parts[3:]
        else:
            return None
        namespace = None
        if len(rest) == 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        kind = KINDS.get((group, rest[0])) if len(rest) == 1 else None
        return (kind, namespace) if kind else None

    def _encoded_items(self, kind: Kind, namespace: str | None, labels: str, fields: str) -> list[bytes] | None:
        """Each matching item's JSON, or None when the cluster does not serve the kind (404)."""
        if kind not in self._encoded:
            return None
        encoded = self._encoded[kind]
        return [
            encoded[_key(o)]
            for o in self.cluster.list_readonly(
                kind, namespace=namespace, label_selector=labels or None, field_selector=fields or None
            )
        ]

    def response(self, target: str, *, gzip_ok: bool = False) -> tuple[int, bytes, bool]:
        """(HTTP status, body, whether the body is gzip) for a GET of ``target`` (path and query) by a
        client that accepts gzip or not."""
        with self._lock:
            if target not in self._pages:
                self._pages[target] = self._compute(target)
            self.served.append(target)
            code, body = self._pages[target]
            if not gzip_ok or len(body) <= GZIP_THRESHOLD:
                return code, body, False
            if target not in self._gzipped:
                self._gzipped[target] = gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
            return code, self._gzipped[target], True

    def _compute(self, target: str) -> tuple[int, bytes]:
        url = urlsplit(target)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        route = self._route(url.path)
        if route is None:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        kind, namespace = route
        items = self._encoded_items(kind, namespace, query.get("labelSelector", ""), query.get("fieldSelector", ""))
        if items is None:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        start = int(base64.urlsafe_b64decode(query["continue"]).decode()) if query.get("continue") else 0
        limit = int(query.get("limit") or 0)
        end = min(len(items), start + limit) if limit > 0 else len(items)
        list_meta: Obj = {"resourceVersion": "987654"}
        if end < len(items):
            list_meta["continue"] = base64.urlsafe_b64encode(str(end).encode()).decode()
            list_meta["remainingItemCount"] = len(items) - end
        head = json.dumps({"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": list_meta})
        return 200, head[:-1].encode() + b',"items":[' + b",".join(items[start:end]) + b"]}"

    def take_served(self) -> list[str]:
        """The list requests served since the last call."""
        with self._lock:
            served, self.served = self.served, []
            return served


def serve(recording: Recording, port: int = 0) -> ThreadingHTTPServer:
    """An HTTP/1.1 server (keep-alive, one thread per connection) for ``recording`` on loopback."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

        def do_GET(self) -> None:
            gzipped = False
            if self.path.startswith("/_replay/requests"):
                code, body = 200, json.dumps(recording.take_served()).encode()
            else:
                accepts = self.headers.get("Accept-Encoding", "")
                code, body, gzipped = recording.response(self.path, gzip_ok="gzip" in accepts)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Vary", "Accept-Encoding")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the bench prints its own lines."""

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


def main() -> None:
    """Build the cluster, then replay it until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sim = build(parse_scenario(scenario_text(args.nodes)))
    server = serve(Recording(sim.cluster), args.port)
    print(f"replaying on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
