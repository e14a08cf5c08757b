"""A real Kubernetes control plane on loopback for tests: etcd, kube-apiserver, kube-controller-manager.

The binaries are built by scripts/build-peers from the modules pinned in tests/peers/go.mod
(k8s.io/kubernetes v1.37.2, go.etcd.io/etcd/server/v3 v3.7.0). Certificates are made with the
openssl CLI: a throwaway CA, the API server's serving certificate for 127.0.0.1, an admin client
certificate in ``system:masters`` and an ECDSA key that signs service-account tokens. The
controller manager runs only the controllers the tests lean on: garbage collection, the
disruption controller (a PodDisruptionBudget's status, which the Eviction API reads), the
namespace controller, the service-account controller (each namespace's ``default`` account,
without which the API server refuses pods), the ValidatingAdmissionPolicy status controller
(the type-check warnings of a policy's CEL in its status), and DRA's two: the device taint eviction
controller and the ResourceClaim controller (a claim deleted after its pod is deallocated, as in any
cluster, so its devices go back to the scheduler).

The API server keeps an audit log (JSON lines, ``ApiServer.audit_log``) of every write request
(create, update, patch, delete, deletecollection) and list at Metadata level, and of the marks a
test sets (``GET /audit-mark/...``); peers/audit.py counts the writes between two marks.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from peers.binaries import peer_or_skip

#: Writes at Metadata level (who, what, which subresource; no bodies), lists (a controller's pass
#: shows as its lists, so a test can tell that passes happened), and the marks peers/audit.py sets.
#: Both stages are kept: a request's RequestReceived line is written before the server acts on it
#: (in blocking mode), which is what makes a mark a sharp line between two periods.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "rules": [
        {"level": "Metadata", "nonResourceURLs": ["/audit-mark*"]},
        {
            "level": "Metadata",
            "verbs": ["create", "update", "patch", "delete", "deletecollection", "list", "get", "watch"],
        },
        {"level": "None"},
    ],
}

#: The namespaces the tests write into; made once per session (namespace deletion is slow).
TEST_NAMESPACES = ("ml", "web", "gpu", "gpu-operator", "gpuchain", "kube-system")


def free_port() -> int:
    """An unused loopback TCP port (closed again before use; good enough for a test server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d: Path) -> None:
    """CA, serving cert (127.0.0.1/localhost), admin client cert, service-account signing key pair."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=gpuchain-test-ca", cwd=d)
    signed = ["-x509", "-CA", "ca.crt", "-CAkey", "ca.key", *ec]
    _openssl(
        "req", *signed, "-keyout", "server.key", "-out", "server.crt", "-subj", "/CN=kube-apiserver",
        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc",
        "-addext", "extendedKeyUsage=serverAuth", cwd=d,
    )  # fmt: skip
    _openssl(
        "req", *signed, "-keyout", "admin.key", "-out", "admin.crt", "-subj", "/O=system:masters/CN=admin",
        "-addext", "extendedKeyUsage=clientAuth", cwd=d,
    )  # fmt: skip
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=d)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, url: str, ca: Path, user: dict[str, str], name: str = "peer") -> Path:
    """A one-context kubeconfig for ``url`` with ``user`` (client-certificate-data/key or token)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url, "certificate-authority-data": _b64(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class ApiServer:
    """A running control plane: its URL, an admin kubeconfig, and what a test needs to add users."""

    url: str
    kubeconfig: Path
    ca: Path
    workdir: Path

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (see AUDIT_POLICY), one JSON event per line."""
        return self.workdir / "audit.log"

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.workdir / "admin.crt"), str(self.workdir / "admin.key"))
        return ctx

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        """One admin request (JSON in, JSON out); raises urllib.error.HTTPError on a non-2xx status."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=self._ssl(), timeout=30) as resp:
            return dict(json.loads(resp.read() or b"{}"))

    def service_account_token(self, namespace: str, name: str, bound_pod: dict | None = None) -> str:
        """A TokenRequest token for ``namespace/name`` (made if absent), optionally bound to a pod.

        A token bound to a pod on a node carries the node's name in its claims, which is what a
        ValidatingAdmissionPolicy reads as ``request.userInfo.extra['authentication.kubernetes.io/node-name']``.
        """
        self.ensure_service_account(namespace, name)
        spec: dict = {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}
        if bound_pod is not None:
            meta = bound_pod["metadata"]
            spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]}
        out = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", {"spec": spec})
        return str(out["status"]["token"])

    def reset(self) -> None:
        """Empty the cluster of what tests write, so each test starts from a bare cluster.

        Deletes collections at once (pods with no grace period: no kubelet is there to finish a
        graceful deletion); namespaces are kept, since deleting one takes the namespace controller
        seconds. Custom resources are cleared for every CRD present, then the CRDs themselves.
        """
        zero = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
        for path in ("/api/v1/nodes", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
                     "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"):  # fmt: skip
            self.request("DELETE", path, zero)
        namespaces = [n["metadata"]["name"] for n in self.request("GET", "/api/v1/namespaces")["items"]]
        crds = self.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions").get("items", [])
        for crd in crds:
            spec = crd["spec"]
            version = spec["versions"][0]["name"]
            base = f"/apis/{spec['group']}/{version}"
            if spec["scope"] == "Namespaced":
                paths = [f"{base}/namespaces/{ns}/{spec['names']['plural']}" for ns in namespaces]
            else:
                paths = [f"{base}/{spec['names']['plural']}"]
            for path in paths:
                self._delete_quietly(path, zero)
        if crds:
            self.request("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", zero)
            # A CRD goes only after its cleanup finalizer ran; creating it again before that is a 409.
            deadline = time.monotonic() + 30
            while self.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions").get("items"):
                if time.monotonic() > deadline:
                    raise RuntimeError("CRDs of an earlier test were not removed within 30s")
                time.sleep(0.1)
        for ns in namespaces:
            for path in (
                f"/api/v1/namespaces/{ns}/pods",
                f"/api/v1/namespaces/{ns}/events",
                f"/apis/apps/v1/namespaces/{ns}/daemonsets",
                f"/apis/apps/v1/namespaces/{ns}/deployments",
                f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
            ):
                self.request("DELETE", path, zero)
            # Keep what the control plane itself made there (kube-root-ca.crt, leases' namespaces).
            self.request(
                "DELETE", f"/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name!=kube-root-ca.crt", zero
            )
            # Services (the operator's exporter Service) go one by one: not every release serves a
            # collection delete for them; the API server's own default/kubernetes stays.
            for svc in self.request("GET", f"/api/v1/namespaces/{ns}/services").get("items", []):
                name = svc["metadata"]["name"]
                if (ns, name) != ("default", "kubernetes"):
                    self._delete_quietly(f"/api/v1/namespaces/{ns}/services/{name}", zero)
            # Service accounts tests made (copy_into, the operator's own); the controller's "default" stays.
            self.request(
                "DELETE", f"/api/v1/namespaces/{ns}/serviceaccounts?fieldSelector=metadata.name!=default", zero
            )
        for path in ("/apis/node.k8s.io/v1/runtimeclasses",):
            self.request("DELETE", path, zero)

    def ensure_service_account(self, namespace: str, name: str) -> None:
        """Create service account ``namespace/name`` unless it exists (pods naming it need it first)."""
        try:
            self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise

    def ensure_namespace(self, name: str) -> None:
        """Create namespace ``name`` unless it exists (and wait for its default service account)."""
        try:
            self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                raise
        deadline = time.monotonic() + 30
        while True:
            try:
                self.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
                return
            except urllib.error.HTTPError as exc:
                if exc.code != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def _delete_quietly(self, path: str, options: dict) -> None:
        try:
            self.request("DELETE", path, options)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # a CRD whose kind is not served yet
                raise

    def kubeconfig_for_token(self, token: str, path: Path) -> Path:
        """A kubeconfig that authenticates with ``token`` (a service account's, for RBAC/VAP tests)."""
        return write_kubeconfig(path, self.url, self.ca, {"token": token})


def _wait_ready(url: str, ctx: ssl.SSLContext | None, proc: subprocess.Popen, log: Path, deadline: float) -> None:
    """Poll ``url`` until 200, failing with the peer's log tail if it exits or the deadline passes."""
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = str(exc)
        time.sleep(0.25)
    raise RuntimeError(f"{url} not ready in time ({last}):\n{log.read_text()[-4000:]}")


def _spawn(stack: ExitStack, args: list[str], log: Path) -> subprocess.Popen:
    out = log.open("wb")
    stack.callback(out.close)
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    stack.callback(stop)
    return proc


FEATURE_GATES = "DRADeviceTaints=true,DRAPartitionableDevices=true,DRAConsumableCapacity=true,DRAExtendedResource=true"
"""Feature gates of the API server, controller manager and scheduler: device taints, partitionable
devices (``sharedCounters``, ``consumesCounters``: MIG placements sharing a GPU), consumable
capacity (``allowMultipleAllocations``, request policies: claims sharing a GPU) and extended
resources backed by DRA (a DeviceClass's ``extendedResourceName``: ``nvidia.com/gpu`` served by
DRA devices on nodes without a device plugin's): alpha in 1.34, on by default since 1.36 (beta; device
taints and extended resources GA in 1.37). Named anyway: a peer that lacks one refuses to start
rather than run without it."""


@contextmanager
def control_plane(workdir: Path) -> Iterator[ApiServer]:
    """Start etcd, kube-apiserver and kube-controller-manager under ``workdir``; stop them on exit."""
    etcd_bin = peer_or_skip("etcd")
    apiserver_bin = peer_or_skip("kube-apiserver")
    kcm_bin = peer_or_skip("kube-controller-manager")
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is needed to make the test control plane's certificates")
    workdir.mkdir(parents=True, exist_ok=True)
    make_certs(workdir)
    (workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    ca = workdir / "ca.crt"
    with ExitStack() as stack:
        client_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client_port}"
        etcd = _spawn(
            stack,
            [
                str(etcd_bin),
                "--name=peer",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=peer=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",  # a test cluster: durability is not the point, 2 shared cores are
                "--log-level=warn",
            ],
            workdir / "etcd.log",
        )
        deadline = time.monotonic() + 120
        _wait_ready(f"{etcd_url}/health", None, etcd, workdir / "etcd.log", deadline)

        port = free_port()
        url = f"https://127.0.0.1:{port}"
        apiserver = _spawn(
            stack,
            [
                str(apiserver_bin),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # Since 1.35 a loopback advertise address is refused by the endpoint reconciler, which
                # only keeps default/kubernetes's endpoints: nothing here reaches the server that way.
                "--endpoint-reconciler-type=none",
                f"--secure-port={port}",
                f"--cert-dir={workdir / 'certs'}",
                f"--tls-cert-file={workdir / 'server.crt'}",
                f"--tls-private-key-file={workdir / 'server.key'}",
                f"--client-ca-file={ca}",
                f"--service-account-key-file={workdir / 'sa.pub'}",
                f"--service-account-signing-key-file={workdir / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--api-audiences=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--authorization-mode=RBAC",
                # Device taints (KEP-5055, GA in 1.37): Device.taints in ResourceSlices, and the
                # DeviceTaintRule API the device taint eviction controller watches. Partitionable
                # devices (KEP-4815, beta in 1.37): sharedCounters and consumesCounters kept.
                f"--feature-gates={FEATURE_GATES}",
                "--runtime-config=resource.k8s.io/v1alpha3=true",
                "--allow-privileged=true",  # as real clusters run: the driver and toolkit operands are privileged
                "--profiling=false",
                f"--audit-policy-file={workdir / 'audit-policy.yaml'}",
                f"--audit-log-path={workdir / 'audit.log'}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",  # written before the request is served: see AUDIT_POLICY
                "--v=1",
            ],
            workdir / "kube-apiserver.log",
        )
        admin_ctx = ssl.create_default_context(cafile=str(ca))
        admin_ctx.load_cert_chain(str(workdir / "admin.crt"), str(workdir / "admin.key"))
        _wait_ready(f"{url}/readyz", admin_ctx, apiserver, workdir / "kube-apiserver.log", deadline)
        kubeconfig = write_kubeconfig(
            workdir / "admin.kubeconfig",
            url,
            ca,
            {"client-certificate-data": _b64(workdir / "admin.crt"), "client-key-data": _b64(workdir / "admin.key")},
        )
        kcm = _spawn(
            stack,
            [
                str(kcm_bin),
                f"--kubeconfig={kubeconfig}",
                "--controllers=garbagecollector,disruption,namespace,serviceaccount,validatingadmissionpolicy-status-controller,"
                "device-taint-eviction-controller,"  # evicts the pods of a claim on a NoExecute-tainted device
                # drops a gone pod from a claim's reservedFor, then deallocates a deleted claim and lifts its
                # finalizer: without it a deleted claim keeps its devices allocated for the rest of the session
                "resourceclaim-controller",
                f"--feature-gates={FEATURE_GATES}",
                "--leader-elect=false",
                "--secure-port=0",
                "--concurrent-gc-syncs=5",
                "--v=1",
            ],
            workdir / "kube-controller-manager.log",
        )
        server = ApiServer(url=url, kubeconfig=kubeconfig, ca=ca, workdir=workdir)
        for ns in TEST_NAMESPACES:
            try:
                server.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
            except urllib.error.HTTPError as exc:
                if exc.code != 409:
                    raise
        _wait_default_accounts(server, kcm, workdir / "kube-controller-manager.log", deadline)
        yield server


def _wait_default_accounts(server: ApiServer, kcm: subprocess.Popen, log: Path, deadline: float) -> None:
    """Pods are refused until their namespace's ``default`` service account exists (the KCM makes it)."""
    for ns in (*TEST_NAMESPACES, "default"):
        while True:
            if kcm.poll() is not None:
                raise RuntimeError(f"kube-controller-manager exited with {kcm.returncode}:\n{log.read_text()[-4000:]}")
            try:
                server.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
                break
            except urllib.error.HTTPError as exc:
                if exc.code != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
