"""LiveCluster specifics over real HTTP (kmock): the Eviction API's 429, error mapping, the log
request, the strategic merge patch of a condition, a watch's field selector, and kubeconfig contexts."""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import ssl
import subprocess
import sys
import threading
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from kube.kmock_server import kmock_server
from lightkube import ConfigError, KubeConfig
from lightkube.config import client_adapter
from lightkube.config.models import Cluster as KubeConfigCluster
from lightkube.config.models import User

from gpuchain.kube import NODE, POD, BadRequestError, EvictionBlockedError, KubeError, LiveCluster, NotFoundError, live
from gpuchain.kube.errors import TooManyRequestsError

REFUSAL = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
    "reason": "TooManyRequests",
    "details": {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget train-pdb needs 2 healthy pods and has 2 currently",
            }
        ]
    },
    "code": 429,
}


def test_eviction_refusal_names_the_budget() -> None:
    # kmock has no eviction subresource: answer as the API server does, over real HTTP.
    with kmock_server() as (url, emulator):
        emulator["post /api/v1/namespaces/ml/pods/w1/eviction"] << 429 << REFUSAL
        cluster = LiveCluster.from_url(url)
        with pytest.raises(EvictionBlockedError) as err:
            cluster.evict("w1", "ml")
        assert err.value.pdb == "train-pdb"
        assert (err.value.namespace, err.value.pod) == ("ml", "w1")
        assert cluster.calls.snapshot() == {"evict": 1}


def test_a_throttled_eviction_is_not_blamed_on_a_budget() -> None:
    throttled = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "TooManyRequests", "code": 429}
    with kmock_server() as (url, emulator):
        emulator["post /api/v1/namespaces/ml/pods/w1/eviction"] << 429 << throttled
        with pytest.raises(TooManyRequestsError, match="throttling"):
            LiveCluster.from_url(url).evict("w1", "ml")


def test_server_errors_are_typed() -> None:
    with kmock_server() as (url, emulator):
        emulator["get /api/v1/nodes/broken"] << 500 << {"kind": "Status", "code": 500, "message": "etcd is down"}
        cluster = LiveCluster.from_url(url)
        with pytest.raises(NotFoundError):
            cluster.get(NODE, name="absent")
        with pytest.raises(KubeError) as err:
            cluster.get(NODE, name="broken")
        assert err.value.code == 500
        assert "etcd is down" in str(err.value)


def test_logs_request_asks_for_container_tail_and_previous() -> None:
    # kmock keeps no logs: answer the log endpoint as the API server does, and check what was asked.
    with kmock_server() as (url, emulator):
        served = emulator["get /api/v1/namespaces/ml/pods/w1/log"]
        served << b"Could not resolve Linux kernel version\nexiting\n"
        cluster = LiveCluster.from_url(url)
        text = cluster.logs("w1", namespace="ml", container="nvidia-driver-ctr", tail_lines=50, previous=True)
        assert text == "Could not resolve Linux kernel version\nexiting\n"
        cluster.logs("w1", namespace="ml")
        assert [dict(r.params) for r in served] == [
            {"container": "nvidia-driver-ctr", "tailLines": "50", "previous": "true"},
            {},
        ]
        assert cluster.calls.snapshot() == {"logs": 2} and cluster.calls.writes == 0


def test_logs_errors_are_typed() -> None:
    with kmock_server() as (url, emulator):
        (
            emulator["get /api/v1/namespaces/ml/pods/w1/log"]
            << 400
            << {
                "kind": "Status",
                "code": 400,
                "reason": "BadRequest",
                "message": 'previous terminated container "main" in pod "w1" not found',
            }
        )
        cluster = LiveCluster.from_url(url)
        with pytest.raises(BadRequestError, match="previous terminated container"):
            cluster.logs("w1", namespace="ml", container="main", previous=True)
        with pytest.raises(NotFoundError):
            cluster.logs("absent", namespace="ml")


def test_pod_proxy_get_asks_the_api_servers_pod_proxy() -> None:
    with kmock_server() as (url, emulator):
        served = emulator["get /api/v1/namespaces/gpu-operator/pods/nvidia-dcgm-exporter-x1:9400/proxy/metrics"]
        served << b"gpuchain_gpus_exported 8\n"
        cluster = LiveCluster.from_url(url)
        assert cluster.pod_proxy_get(
            "nvidia-dcgm-exporter-x1", namespace="gpu-operator", port=9400, path="/metrics"
        ) == ("gpuchain_gpus_exported 8\n")
        assert len(list(served)) == 1
        assert cluster.calls.snapshot() == {"proxy": 1} and cluster.calls.writes == 0


def test_set_condition_sends_a_strategic_merge_patch_of_one_condition() -> None:
    with kmock_server() as (url, emulator):
        cluster = LiveCluster.from_url(url)
        cluster.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        status = emulator["patch /api/v1/nodes/n1/status"]
        cluster.set_condition(NODE, name="n1", condition={"type": "GPUHealthy", "status": "False", "reason": "GPULost"})
        [request] = list(status)
        assert request.headers["Content-Type"] == "application/strategic-merge-patch+json"
        assert request.data == {
            "status": {"conditions": [{"type": "GPUHealthy", "status": "False", "reason": "GPULost"}]}
        }
        cluster.patch_status(NODE, name="n1", status={"phase": "x"})
        assert list(status)[1].headers["Content-Type"] == "application/merge-patch+json"


async def test_watch_sends_the_field_selector() -> None:
    # kmock ignores selectors (it streams every Node): check what the watch request asked for.
    with kmock_server() as (url, emulator):
        cluster = LiveCluster.from_url(url)
        watches = emulator["get /api/v1/nodes"]
        seen = [ev async for ev in cluster.watch(NODE, timeout=1.0, field_selector="metadata.name=gpu-1")]
        assert seen == []
        requests = list(watches)  # a loaded machine may see the watch re-opened within the timeout
        assert requests
        assert all(dict(r.params) == {"watch": "true", "fieldSelector": "metadata.name=gpu-1"} for r in requests)


def test_from_kubeconfig_picks_the_context(tmp_path: Path) -> None:
    with kmock_server() as (url, _emulator):
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "k", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "current-context": "",
        }
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(doc))
        cluster = LiveCluster.from_kubeconfig(str(path), context="c")
        assert cluster.list(NODE) == []
        with pytest.raises(ValueError, match="no context 'nope' in the kubeconfig \\(have: c\\)"):
            LiveCluster.from_kubeconfig(str(path), context="nope")


def test_fixture_discovery_lists_verbs_and_scope() -> None:
    # Watch-based clients (kopf) serve only resources whose discovery says list and watch.
    with kmock_server() as (url, _emulator):

        def discover(path: str) -> dict[str, dict]:
            with urllib.request.urlopen(url + path, timeout=5) as resp:
                return {r["name"]: r for r in json.load(resp)["resources"] if "/" not in r["name"]}

        core, apps = discover("/api/v1"), discover("/apis/apps/v1")
    for res, namespaced in [(core["nodes"], False), (core["pods"], True), (apps["daemonsets"], True)]:
        assert {"get", "list", "watch", "create", "patch", "delete"} <= set(res["verbs"]), res
        assert res["namespaced"] is namespaced, res


def test_default_client_reads_kubeconfig_through_the_bounded_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LiveCluster() with no config read $KUBECONFIG with lightkube's own unbounded reader: a
    # 100 MB file was loaded whole and failed as a YAML ReaderError about a NUL byte.
    big = tmp_path / "kubeconfig"
    with big.open("wb") as fh:
        fh.truncate(100 * 1024 * 1024)
    monkeypatch.setenv("KUBECONFIG", str(big))
    with pytest.raises(ConfigError, match=f"^{big}: is larger than 1024 KiB"):
        LiveCluster()


def _pages_served(cluster: LiveCluster, bodies: dict[str, bytes], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Serve list pages from ``bodies`` by their ``continue`` token ("" first); the tokens asked, in order."""
    asked: list[str] = []

    def page(
        resource: object, params: dict[str, object], ns: dict[str, object], read: threading.Event | None = None
    ) -> bytes:
        token = str(params.get("continue") or "")
        asked.append(token)
        if read is not None:
            read.set()
        return bodies[token]

    monkeypatch.setattr(cluster, "_page", page)
    return asked


def _body(names: list[str], token: str, metadata_first: bool = True) -> bytes:
    items = json.dumps([{"metadata": {"name": n, "managedFields": [{"manager": "kubelet"}]}} for n in names])
    meta = json.dumps({"continue": token} if token else {})
    if metadata_first:
        return f'{{"kind":"NodeList","apiVersion":"v1","metadata":{meta},"items":{items}}}'.encode()
    return f'{{"kind":"NodeList","apiVersion":"v1","items":{items},"metadata":{meta}}}'.encode()


def test_list_readonly_asks_for_the_next_page_from_the_head_and_trusts_the_decoded_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The API server writes a list's metadata first: the next page is asked for from it while the
    # page is decoded. A head that says otherwise than the page (here a second metadata key, which
    # the decoder reads last) costs one request more and changes nothing read; a server that writes
    # the items first is read page by page.
    cluster = LiveCluster.from_url("http://127.0.0.1:9")
    misleading = b'{"metadata":{"continue":"elsewhere"},' + _body(["b"], "c", metadata_first=False)[1:]
    bodies = {
        "": _body(["a"], "b"),
        "b": misleading,
        "elsewhere": _body(["x"], ""),
        "c": _body(["c"], "d", metadata_first=False),
        "d": _body(["d"], ""),
    }
    asked = _pages_served(cluster, bodies, monkeypatch)
    nodes = cluster.list_readonly(NODE)
    assert [n["metadata"] for n in nodes] == [{"name": n} for n in "abcd"]
    assert all(n["kind"] == "Node" and n["apiVersion"] == "v1" for n in nodes)
    assert asked == ["", "b", "elsewhere", "c", "d"]
    assert cluster.calls.snapshot() == {"list": 5}


def test_list_readonly_asks_for_gzip_and_inflates_it_as_the_api_server_sends_it() -> None:
    # The API server gzips a body over 128 KiB (k8s.io/apiserver responsewriters/writers.go) for a
    # client that accepts it; list_readonly reads the compressed body whole and inflates it itself.
    # Pages of 15,000 nodes are over a MiB inflated, the pieces httpx would inflate in.
    names = [f"gpu-{i}" for i in range(30000)]
    bodies = {"": _body(names[:15000], "b"), "b": _body(names[15000:], "")}
    accepted: list[str] = []

    def serve(request: httpx2.Request) -> httpx2.Response:
        accepted.append(request.headers.get("Accept-Encoding", ""))
        body = bodies[request.url.params.get("continue", "")]
        assert len(body) > 1024 * 1024
        sent = httpx2.ByteStream(gzip.compress(body, 1))  # unread, as from the network
        return httpx2.Response(200, stream=sent, headers={"Content-Encoding": "gzip"})

    cluster = LiveCluster.from_url("http://127.0.0.1:9")
    cluster._client._client._client._transport = httpx2.MockTransport(serve)
    nodes = cluster.list_readonly(NODE)
    assert [n["metadata"] for n in nodes] == [{"name": n} for n in names]
    assert accepted == ["gzip", "gzip"]


def test_list_readonly_decodes_plain_dicts_of_the_fields_sent_less_what_it_leaves_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Items decode straight into plain dicts: each field the JSON has (null included), none it lacks,
    # and not the ones no reader of a snapshot reads (a pod's volumes and its containers' mounts, the
    # lists of its IPs, its container statuses' runtime ids, the defaults the API server fills in,
    # its probes' handlers (their timing stays: the doctor raises it), its conditions' timestamps, its metadata's
    # uids, versions and timestamps, any object's
    # managedFields).
    cluster = LiveCluster.from_url("http://127.0.0.1:9")
    mount = {"name": "v", "mountPath": "/v"}
    items = [
        {
            "metadata": {
                "name": "p",
                "labels": {"a": "1"},
                "managedFields": [{"manager": "kubelet"}],
                "uid": "6f1c0e3a-0b7e-4c1f-9a51-3d2f8e1b7c40",
                "resourceVersion": "83210",
                "generation": 1,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "generateName": "p-",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "0c4b"}],
            },
            "spec": {
                "nodeName": "n1",
                "volumes": [{"name": "v", "emptyDir": {}}],
                "containers": [
                    {
                        "name": "c",
                        "volumeMounts": [mount],
                        "readinessProbe": {"exec": {"command": ["true"]}, "timeoutSeconds": 5},
                        "terminationMessagePath": "/dev/termination-log",
                        "imagePullPolicy": "IfNotPresent",
                    }
                ],
                "initContainers": None,
                "dnsPolicy": "ClusterFirst",
                "schedulerName": "default-scheduler",
                "serviceAccountName": "default",
                "terminationGracePeriodSeconds": 30,
            },
            "status": {
                "podIP": "10.0.0.1",
                "qosClass": "BestEffort",
                "startTime": "2026-01-01T00:00:00Z",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
                "podIPs": [{"ip": "10.0.0.1"}],
                "hostIPs": [{"ip": "10.1.0.1"}],
                "containerStatuses": [
                    {
                        "name": "c",
                        "ready": True,
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                        "containerID": "containerd://0a",
                        "imageID": "nvcr.io/x@sha256:0b",
                        "volumeMounts": [mount],
                        "started": True,
                    }
                ],
            },
        },
        {"metadata": {"name": "q"}, "spec": None, "status": None},
    ]
    _pages_served(cluster, {"": json.dumps({"kind": "PodList", "metadata": {}, "items": items}).encode()}, monkeypatch)
    pods = cluster.list_readonly(POD)
    assert pods == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p",
                "labels": {"a": "1"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d"}],
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "readinessProbe": {"timeoutSeconds": 5}}],
                "initContainers": None,
            },
            "status": {
                "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": "c", "ready": True, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
                ],
            },
        },
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"}, "spec": None, "status": None},
    ]
    assert all(type(p) is dict and type(p["metadata"]) is dict for p in pods)
    assert type(pods[0]["spec"]["containers"][0]) is dict
    assert type(pods[0]["status"]["containerStatuses"][0]) is dict


def _config(server: str) -> KubeConfig:
    return KubeConfig.from_one(cluster=KubeConfigCluster(server=server), user=User())


async def test_one_tls_context_serves_the_client_and_every_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """lightkube builds a TLS context for every client it opens, reading the trust store each time
    (some 60 ms and 0.8 MiB): a node agent paid it for its client and again for every watch."""
    built: list[str] = []

    def counted(owner: str, build: Callable[..., ssl.SSLContext]) -> Callable[..., ssl.SSLContext]:
        def verify(*args: Any, **kwargs: Any) -> ssl.SSLContext:
            built.append(owner)
            return build(*args, **kwargs)

        return verify

    monkeypatch.setattr(live, "verify_cluster", counted("gpuchain", live.verify_cluster))
    monkeypatch.setattr(client_adapter, "verify_cluster", counted("lightkube", client_adapter.verify_cluster))
    cluster = LiveCluster(_config("https://127.0.0.1:9"))  # nothing listens: no request is made
    for _ in range(3):  # each watch opens a client of its own; a timeout of 0 ends it before any request
        assert [ev async for ev in cluster.watch(NODE, timeout=0)] == []
    assert built == ["gpuchain"]
    cluster.close()


def test_a_plain_http_server_gets_a_context_that_trusts_nothing() -> None:
    """No connection to an http:// server is TLS: its context loads no trust store, and would fail a
    handshake (it verifies, trusting no one) rather than pass one unverified."""
    for server in ("http://127.0.0.1:8001", "HTTP://localhost:8080"):
        context = live.tls_context(_config(server).get())
        assert context.cert_store_stats()["x509_ca"] == 0
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    https = live.tls_context(_config("https://127.0.0.1:9").get())
    assert https.verify_mode == ssl.CERT_REQUIRED and https.check_hostname


def test_the_client_loads_no_http2_stack_and_still_talks_to_the_api_server() -> None:
    """lightkube requires httpx2[http2], so h2 is installed (here too), but the client speaks HTTP/1.1:
    a fresh interpreter that opens a LiveCluster and reads a Node through it loads neither h2 nor
    hpack (1.2 MiB in every agent that talks to the API server)."""
    assert importlib.metadata.version("h2"), "h2 is not installed: the test would prove nothing"
    program = (
        "import sys\nfrom kube.kmock_server import kmock_server\n"
        "from gpuchain.kube import NODE, LiveCluster\n"
        "with kmock_server() as (url, _):\n"
        "    cluster = LiveCluster.from_url(url)\n"
        "    cluster.create({'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'n', 'labels': {}}})\n"
        "    print(cluster.get(NODE, name='n')['metadata']['name'])\n"
        "    cluster.close()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('h2', 'hpack') and sys.modules[m]))\n"
    )
    tests = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False, cwd=tests
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["n", "[]"]


def test_inflate_uses_isal_where_installed_and_zlib_where_not(monkeypatch: pytest.MonkeyPatch) -> None:
    # ISA-L's inflate (the isal dependency) and zlib's give the same bytes; without isal the client still reads.
    body = b"".join(b'{"metadata":{"name":"gpu-%d"}},' % i for i in range(20000))
    sent = gzip.compress(body, 1)
    live._decompress.cache_clear()
    try:
        assert live._inflate(sent) == body
        assert live._decompress() is not zlib.decompress  # installed with gpuchain
        monkeypatch.setitem(sys.modules, "isal", None)  # an install without it
        live._decompress.cache_clear()
        assert live._decompress() is zlib.decompress
        assert live._inflate(sent) == body
    finally:
        live._decompress.cache_clear()
