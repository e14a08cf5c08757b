"""LeanCluster's configuration: where a process on a node finds the API server and its identity,
and where it hands over to the full client. Its verbs are the port's contract, run against the real
kube-apiserver in tests/kube/test_kube_contract.py (the ``apiserver-lean`` parameter)."""

from __future__ import annotations

import base64
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from gpuchain.kube import NODE, ForbiddenError, NotFoundError, lean
from gpuchain.kube.lean import LeanCluster, Unsupported, endpoint_from_env, from_kubeconfig
from gpuchain.kube.noproxy import bypasses


def kubeconfig(path: Path, user: dict[str, Any], server: str = "https://127.0.0.1:6443", **cluster: Any) -> Path:
    """A one-context kubeconfig, laid out as kubectl writes it."""
    data = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(autouse=True)
def no_proxy_nor_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*lean.PROXY_VARIABLES, "NO_PROXY", "no_proxy", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)


def test_a_token_kubeconfig_names_its_server_context_and_token(tmp_path: Path) -> None:
    ep = from_kubeconfig(kubeconfig(tmp_path / "k", {"token": "abc"}))
    assert (ep.server, ep.context_name) == ("https://127.0.0.1:6443", "ctx")
    assert ep.token is not None and ep.token() == "abc"
    assert ep.tls is not None


def test_a_token_file_is_read_again_after_the_kubelet_rotates_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("first\n")
    ep = from_kubeconfig(kubeconfig(tmp_path / "k", {"tokenFile": "token"}))
    assert ep.token is not None and ep.token() == "first"
    (tmp_path / "token").write_text("second\n")
    assert ep.token() == "first", "re-read at most every TOKEN_REREAD seconds"
    monkeypatch.setattr(lean, "TOKEN_REREAD", 0.0)
    assert ep.token() == "second"


@pytest.mark.parametrize("how", ["exec", "auth-provider"])
def test_a_plugin_that_authenticates_is_left_to_the_full_client(tmp_path: Path, how: str) -> None:
    with pytest.raises(Unsupported, match=how):
        from_kubeconfig(kubeconfig(tmp_path / "k", {how: {"command": "aws"}}))


def test_a_proxy_in_the_environment_is_left_to_the_full_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    with pytest.raises(Unsupported, match="HTTPS_PROXY"):
        endpoint_from_env(str(kubeconfig(tmp_path / "k", {"token": "t"}, server="https://10.96.0.1:443")))
    assert endpoint_from_env(str(kubeconfig(tmp_path / "k", {"token": "t"}))).server == "https://127.0.0.1:6443", (
        "a loopback server is never proxied, as kubectl never proxies it"
    )


@pytest.mark.parametrize(
    ("variable", "no_proxy", "server"),
    [
        ("NO_PROXY", "10.0.0.0/8", "https://10.96.0.1:443"),
        ("no_proxy", "api.example.com", "https://api.example.com:6443"),
        ("NO_PROXY", "svc.internal, example.com", "https://k8s.example.com"),
    ],
)
def test_a_proxy_that_no_proxy_excludes_the_server_from_leaves_the_lean_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, no_proxy: str, server: str
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    monkeypatch.setenv(variable, no_proxy)
    assert endpoint_from_env(str(kubeconfig(tmp_path / "k", {"token": "t"}, server=server))).server == server


def test_no_proxy_that_names_another_server_leaves_the_proxy_to_the_full_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("https_proxy", "http://proxy:3128")
    monkeypatch.setenv("NO_PROXY", "10.0.0.0/8,.svc,other.example.com")
    with pytest.raises(Unsupported, match="https_proxy"):
        endpoint_from_env(str(kubeconfig(tmp_path / "k", {"token": "t"}, server="https://api.example.com:6443")))


@pytest.mark.parametrize(
    ("variable", "server", "lean"),
    [
        ("HTTP_PROXY", "https://api.example.com:6443", True),
        ("https_proxy", "http://api.example.com:8080", True),
        ("http_proxy", "http://api.example.com:8080", False),
    ],
)
def test_only_the_proxy_of_the_servers_scheme_is_left_to_the_full_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, server: str, lean: bool
) -> None:
    """As kubectl (Go's httpproxy) and httpx2 choose a proxy: ``HTTPS_PROXY`` for an https URL,
    ``HTTP_PROXY`` for an http one, never the other's."""
    monkeypatch.setenv(variable, "http://proxy:3128")
    file = str(kubeconfig(tmp_path / "k", {"token": "t"}, server=server))
    if lean:
        assert endpoint_from_env(file).server == server
    else:
        with pytest.raises(Unsupported, match=variable):
            endpoint_from_env(file)


@pytest.mark.parametrize(
    ("no_proxy", "url", "direct"),
    [
        ("*", "https://api.example.com", True),
        ("example.com", "https://example.com", True),
        ("example.com", "https://api.example.com", True),
        ("example.com", "https://notexample.com", False),
        (".example.com", "https://api.example.com", True),
        (".example.com", "https://example.com", False),
        ("*.example.com", "https://a.b.example.com", True),
        ("*.example.com", "https://example.com", False),
        ("EXAMPLE.com", "https://API.example.COM:6443", True),
        ("example.com:6443", "https://api.example.com:6443", True),
        ("example.com:6443", "https://api.example.com", False),
        ("example.com:443", "https://api.example.com", True),
        ("example.com:80", "http://api.example.com", True),
        ("example.com:x", "https://api.example.com", False),
        ("10.96.0.1", "https://10.96.0.1:443", True),
        ("10.96.0.1", "https://10.96.0.10", False),
        ("10.96.0.1:6443", "https://10.96.0.1:443", False),
        ("10.96.0.1:443", "https://10.96.0.1", True),
        ("10.0.0.0/8", "https://10.96.0.1", True),
        ("10.0.0.0/8", "https://11.0.0.1", False),
        ("10.0.0.0/8", "https://ten.example.com", False),
        ("fd00::/8", "https://[fd12::1]:6443", True),
        ("fd00::/8", "https://10.0.0.1", False),
        ("fd12::1", "https://[fd12::1]:6443", True),
        ("[fd12::1]:6443", "https://[fd12::1]:6443", True),
        ("[fd12::1]:443", "https://[fd12::1]:6443", False),
        (" , ,example.org , 10.0.0.0/8", "https://10.1.2.3", True),
        ("", "https://api.example.com", False),
        ("10.0.0.0/33", "https://10.0.0.1", False),
        ("", "https://localhost:6443", True),
        ("", "https://127.0.0.1:6443", True),
        ("", "https://[::1]:6443", True),
    ],
)
def test_no_proxy_reads_as_kubectl_reads_it(no_proxy: str, url: str, direct: bool) -> None:
    """Go's golang.org/x/net/http/httpproxy rules: names and their subdomains, a leading dot or ``*.``
    for subdomains alone, ``*``, IP addresses and CIDR blocks for IP hosts, ``:port`` against the
    request's port (the scheme's default counting), and loopback never proxied."""
    assert bypasses(url, no_proxy) is direct


def test_a_missing_context_names_the_ones_there(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match=r"no context 'other' in contexts \(have: ctx\)"):
        from_kubeconfig(kubeconfig(tmp_path / "k", {"token": "t"}), "other")


def test_a_file_that_is_not_a_kubeconfig_says_so(tmp_path: Path) -> None:
    (tmp_path / "k").write_text("- a list\n")
    with pytest.raises(ValueError, match="is not a kubeconfig"):
        from_kubeconfig(tmp_path / "k")


def test_in_a_pod_the_service_account_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("pod-token")
    (sa / "ca.crt").write_text(_self_signed(tmp_path))
    monkeypatch.setattr(lean, "SERVICE_ACCOUNT", sa)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    ep = endpoint_from_env()
    assert (ep.server, ep.context_name) == ("https://[fd00::1]:443", "default")
    assert ep.token is not None and ep.token() == "pod-token"


def _self_signed(tmp_path: Path) -> str:
    """A CA certificate in PEM made by openssl (Debian's, which CI installs)."""
    key, crt = tmp_path / "ca.key", tmp_path / "ca.crt"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
            *("-keyout", str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=test-ca"),
        ],
        check=True,
        capture_output=True,
    )
    return crt.read_text()


class _Api(http.server.BaseHTTPRequestHandler):
    """An API server's answers: one Node, a forbidden one, and NotFound for anything else."""

    seen: ClassVar[list[tuple[str, str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        if self.path == "/api/v1/nodes/gpu-1":
            self._answer(200, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}})
        elif self.path.startswith("/api/v1/nodes/secret"):
            self._answer(403, {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "nodes is forbidden"})
        else:
            self._answer(404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"})

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Api.seen.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_requests_carry_the_token_and_errors_are_typed(tmp_path: Path, api: str) -> None:
    cluster = LeanCluster(from_kubeconfig(kubeconfig(tmp_path / "k", {"token": "s3cret"}, server=api)))
    try:
        assert cluster.get(NODE, name="gpu-1")["metadata"]["name"] == "gpu-1"
        with pytest.raises(ForbiddenError, match="nodes is forbidden"):
            cluster.get(NODE, name="secret")
        with pytest.raises(NotFoundError):
            cluster.get(NODE, name="gone")
    finally:
        cluster.close()
    assert [a for _, _, a in _Api.seen] == ["Bearer s3cret"] * 3
    assert cluster.calls.snapshot() == {"get": 3}


def test_basic_authentication(tmp_path: Path, api: str) -> None:
    cluster = LeanCluster(from_kubeconfig(kubeconfig(tmp_path / "k", {"username": "a", "password": "b"}, server=api)))
    cluster.get(NODE, name="gpu-1")
    cluster.close()
    assert _Api.seen[0][2] == "Basic " + base64.b64encode(b"a:b").decode()


def test_the_node_agents_client_loads_neither_lightkube_nor_httpx(tmp_path: Path, api: str) -> None:
    """A node agent on a live cluster opens LeanCluster: lightkube, httpx2 and anyio (11 MiB) stay out."""
    config = kubeconfig(tmp_path / "k", {"token": "t"}, server=api)
    program = (
        "import sys\n"
        "from gpuchain.commands._cluster import open_node_cluster\n"
        "from gpuchain.kube import NODE\n"
        "c = open_node_cluster()\n"
        "print(type(c).__mro__[1].__name__, c.get(NODE, name='gpu-1')['metadata']['name'])\n"
        "print(sorted(m for m in ('lightkube', 'httpx2', 'anyio') if m in sys.modules))\n"
    )
    env = {**os.environ, "KUBECONFIG": str(config)}
    for name in (*lean.PROXY_VARIABLES, "KUBERNETES_SERVICE_HOST"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["LeanCluster gpu-1", "[]"]


def test_an_exec_kubeconfig_opens_the_full_client(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "k", {"exec": {"command": "true", "apiVersion": "client.authentication.k8s.io/v1"}})
    program = (
        "from gpuchain.commands._cluster import open_node_cluster\n"
        "print(type(open_node_cluster()).__mro__[1].__name__)\n"
    )
    env = {**os.environ, "KUBECONFIG": str(config)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "LiveCluster"


def test_in_a_pod_the_real_api_server_knows_the_service_account(
    apiserver: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-cluster path end to end on the real kube-apiserver: its CA verifies the server, its
    TokenRequest token is the identity (RBAC grants it nothing, so the answer names it)."""
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(apiserver.service_account_token("kube-system", "gpuchain-node"))
    (sa / "ca.crt").write_bytes(apiserver.ca.read_bytes())
    monkeypatch.setattr(lean, "SERVICE_ACCOUNT", sa)
    host, port = apiserver.url.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    cluster = LeanCluster(endpoint_from_env())
    try:
        with pytest.raises(ForbiddenError, match="system:serviceaccount:kube-system:gpuchain-node"):
            cluster.get(NODE, name="gpu-1")
    finally:
        cluster.close()
