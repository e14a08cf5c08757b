"""LeanCluster: the `Cluster` port over a real API server on Python's standard library alone.

Why a second adapter beside `LiveCluster`: a node agent runs on every GPU node, and lightkube with
httpx2, anyio and their imports is 11 of the 21 MiB a node agent with every role adds over a bare
grpc process (bench.agents.imports); ``http.client``, ``ssl`` and ``json`` are 1.8 MiB. What a
process on a node needs of a Kubernetes client is narrow: its pod's service account (or a
kubeconfig with a token or a client certificate), HTTP/1.1 to one server, and the port's verbs. So
this adapter speaks exactly that, and `open` says when it cannot (a kubeconfig that runs an exec
plugin or an auth provider, a proxy in the environment that NO_PROXY does not exclude the server
from): the caller then opens `LiveCluster`, which does all of it. Both answer the same contract
tests against the real kube-apiserver (tests/kube/test_kube_contract.py); requests, errors and
watches follow lightkube's: HTTP errors become `gpuchain.kube.errors`' typed errors, a watch whose
stream the server ends is opened again from the last resourceVersion seen, and an ERROR event
raises.

Transport failures (connection refused, TLS, a timeout, an answer that is not JSON) are raised as
they are (`OSError`, `http.client.HTTPException`, `json.JSONDecodeError`): `TRANSPORT_FAILURES`
names them for the command layer, which makes them one line as it does `LiveCluster`'s.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import http.client
import json
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from gpuchain import __version__
from gpuchain.common.inputfile import read_input_text
from gpuchain.kube.errors import KubeError, error_for_status, eviction_error
from gpuchain.kube.kinds import POD, Kind, kind_of, listed_with_kind
from gpuchain.kube.noproxy import bypasses, no_proxy_setting
from gpuchain.kube.objects import Obj
from gpuchain.kube.port import Cluster, WatchEvent, check_tail_lines
from gpuchain.kube.selectors import parse_field_requirements, parse_requirements

TRANSPORT_FAILURES: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException, json.JSONDecodeError)
"""What a request raises when the server did not answer as a Kubernetes API server."""

REQUEST_TIMEOUT = 10.0
"""Seconds to connect and between reads of one request (lightkube's default); a watch waits for
its next event without a limit, as lightkube's does."""
REWATCH_PAUSE = 1.0
"""Seconds before a watch whose stream ended at once, empty, is asked for again."""
PROXY_TIMEOUT = 10.0
"""Seconds a pod proxy read may take, as `LiveCluster`'s."""
TOKEN_REREAD = 60.0
"""Seconds a service account token read from its file is used before the file is read again: the
kubelet rotates a projected token well before it expires (client-go re-reads it every minute)."""
KUBECONFIG_MAX_BYTES = 1024 * 1024
"""The largest kubeconfig read: a busy one with embedded certificates for dozens of clusters is
well under this; a wrong path to a log or an image must not be read into memory (a 100 MB file
once ran for minutes and grew the process to 4.5 GB)."""
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where the kubelet mounts a pod's service account token and the cluster's CA."""
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
"""Proxy settings lightkube honours and this adapter does not: with the one for the API server's
scheme set (``HTTPS_PROXY`` for an ``https://`` server, ``HTTP_PROXY`` for ``http://``: kubectl and
lightkube's httpx2 never send a request through the other scheme's proxy), `open` declines unless
``NO_PROXY`` excludes the API server (`gpuchain.kube.noproxy`)."""


class Unsupported(Exception):
    """The configuration needs what only the full client (`LiveCluster`) does; ``str`` says what."""


class _Token:
    """A bearer token, fixed or read from a file and re-read every `TOKEN_REREAD` seconds."""

    def __init__(self, value: str = "", file: Path | None = None) -> None:
        self._value = value
        self._file = file
        self._read_at = -TOKEN_REREAD

    def __call__(self) -> str:
        if self._file is not None and time.monotonic() - self._read_at >= TOKEN_REREAD:
            self._value = self._file.read_text().strip()
            self._read_at = time.monotonic()
        return self._value


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where the API server is and how to prove who this process is."""

    server: str
    """``https://host:port`` (or ``http://`` for a local test server), without a trailing slash."""
    tls: ssl.SSLContext | None
    """The context of every connection (None for plain http)."""
    token: Callable[[], str] | None = None
    """The bearer token of each request, when the identity is a token."""
    basic: str = ""
    """``user:password`` for basic authentication, when the kubeconfig has one."""
    context_name: str = ""
    """The kubeconfig context this endpoint was read from ("default" in a pod, as lightkube names it)."""


def in_cluster() -> Endpoint | None:
    """This pod's service account, when the process runs in a pod (the kubelet set
    KUBERNETES_SERVICE_HOST and mounted the token); None elsewhere."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    token = SERVICE_ACCOUNT / "token"
    if not host or not port or not token.exists():
        return None
    host = f"[{host}]" if ":" in host else host
    tls = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
    return Endpoint(server=f"https://{host}:{port}", tls=tls, token=_Token(file=token), context_name="default")


def from_kubeconfig(path: str | Path, context: str | None = None) -> Endpoint:
    """The endpoint of ``context`` (else the current one) of the kubeconfig at ``path``.

    ValueError/LookupError for a file that is not a usable kubeconfig (naming what is wrong);
    `Unsupported` for a user that authenticates by an exec plugin or an auth provider."""
    file = Path(path).expanduser()
    data = kubeconfig_data(file)
    name = context or data.get("current-context") or ""
    ctx = _named(data, "contexts", "context", name, file)
    cluster = _named(data, "clusters", "cluster", ctx.get("cluster", ""), file)
    user = _named(data, "users", "user", ctx["user"], file) if ctx.get("user") else {}
    for unsupported in ("exec", "auth-provider"):
        if user.get(unsupported):
            raise Unsupported(f"the kubeconfig's user authenticates with {unsupported}")
    server = str(cluster.get("server") or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise ValueError(f"{file}: cluster {ctx.get('cluster')!r} has no https:// server address")
    base = file.parent
    tls = _tls(cluster, user, base) if server.startswith("https://") else None
    token_file = user.get("tokenFile")
    token = _Token(file=base / token_file) if token_file else _Token(str(user["token"])) if user.get("token") else None
    basic = f"{user['username']}:{user.get('password', '')}" if user.get("username") else ""
    return Endpoint(server=server, tls=tls, token=token, basic=basic, context_name=str(name))


def kubeconfig_data(file: Path) -> dict[str, Any]:
    """A kubeconfig file's mapping, read through gpuchain's one input reader (bounded, regular, UTF-8 text:
    ConfigFileError naming a directory, a FIFO or a huge file); ValueError when it is no mapping. Both adapters
    read their kubeconfig through it."""
    import yaml

    data = yaml.safe_load(read_input_text(file, KUBECONFIG_MAX_BYTES))
    if not isinstance(data, dict):
        raise ValueError(f"{file}: is not a kubeconfig (a YAML mapping with clusters, users and contexts)")
    return data


def _named(data: dict[str, Any], section: str, key: str, name: str, file: Path) -> dict[str, Any]:
    """The ``key`` mapping of the entry called ``name`` in the kubeconfig's ``section``."""
    for entry in data.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return dict(entry.get(key) or {})
    have = ", ".join(str(e.get("name")) for e in data.get(section) or [] if isinstance(e, dict))
    raise LookupError(f"{file}: no {key} {name!r} in {section} (have: {have or 'none'})")


def _tls(cluster: dict[str, Any], user: dict[str, Any], base: Path) -> ssl.SSLContext:
    """The TLS context of a kubeconfig's cluster and user: its CA (else the system's trust store),
    its client certificate, and no verification where it says insecure-skip-tls-verify."""
    ca_data = cluster.get("certificate-authority-data")
    ca_file = cluster.get("certificate-authority")
    if ca_data:
        tls = ssl.create_default_context(cadata=base64.b64decode(ca_data).decode())
    elif ca_file:
        tls = ssl.create_default_context(cafile=str(base / ca_file))
    else:
        tls = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    cert, key = user.get("client-certificate-data"), user.get("client-key-data")
    if cert and key:
        # ssl reads a certificate chain from files only: one private file, read at once and removed.
        with tempfile.NamedTemporaryFile("wb", prefix="gpuchain-client-", suffix=".pem") as pem:
            pem.write(base64.b64decode(cert) + b"\n" + base64.b64decode(key))
            pem.flush()
            tls.load_cert_chain(pem.name)
    elif user.get("client-certificate"):
        tls.load_cert_chain(str(base / user["client-certificate"]), str(base / user["client-key"]))
    return tls


def endpoint_from_env(path: str | None = None, context: str | None = None) -> Endpoint:
    """``path``'s kubeconfig, else in-cluster config, ``$KUBECONFIG`` or ``~/.kube/config``: where
    `LiveCluster` looks, in its order. `Unsupported` where only the full client can connect: a
    proxy is set and ``NO_PROXY`` does not exclude the server (read as kubectl reads it)."""
    if path:
        endpoint = from_kubeconfig(path, context)
    else:
        pod = None if context else in_cluster()
        endpoint = pod or from_kubeconfig(os.environ.get("KUBECONFIG") or "~/.kube/config", context)
    scheme = endpoint.server.partition("://")[0].upper() + "_PROXY"
    proxies = [v for v in PROXY_VARIABLES if v.upper() == scheme and os.environ.get(v)]
    if proxies and not bypasses(endpoint.server, no_proxy_setting()):
        raise Unsupported(f"{proxies[0]} is set")
    return endpoint


class LeanCluster(Cluster):
    """The port over one API server, one keep-alive connection per thread plus one per watch."""

    def __init__(self, endpoint: Endpoint, field_manager: str = "gpuchain") -> None:
        super().__init__()
        self._endpoint = endpoint
        self._field_manager = field_manager
        split = urlsplit(endpoint.server)
        self._https = split.scheme == "https"
        self._host = split.hostname or ""
        self._port = split.port or (443 if self._https else 80)
        self._prefix = split.path.rstrip("/")
        self._local = threading.local()
        self._opened: list[http.client.HTTPConnection] = []

    @property
    def server(self) -> str:
        """The API server's address, for messages that must say which cluster."""
        return self._endpoint.server

    @property
    def context_name(self) -> str:
        """The kubeconfig context this cluster was opened with."""
        return self._endpoint.context_name

    def close(self) -> None:
        """Close every connection this cluster opened (a thread's next request opens its own again, which the
        next close() closes too: the list keeps every connection object, each one per thread)."""
        for conn in self._opened:
            conn.close()

    # -- requests ------------------------------------------------------------------------------

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._endpoint.tls)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": f"gpuchain/{__version__}"}
        if content_type:
            headers["Content-Type"] = content_type
        if self._endpoint.token is not None:
            headers["Authorization"] = f"Bearer {self._endpoint.token()}"
        elif self._endpoint.basic:
            headers["Authorization"] = "Basic " + base64.b64encode(self._endpoint.basic.encode()).decode()
        return headers

    def _url(self, kind: Kind, namespace: str | None, name: str = "", sub: str = "", **query: Any) -> str:
        """The path and query of a request; a namespaced kind with ``namespace`` None is every namespace."""
        root = f"/api/{kind.version}" if not kind.group else f"/apis/{kind.group}/{kind.version}"
        path = self._prefix + root
        if kind.namespaced and namespace is not None:
            path += f"/namespaces/{quote(namespace, safe='')}"
        path += f"/{kind.plural}"
        if name:
            path += f"/{quote(name, safe=':')}"
        if sub:
            path += f"/{sub}"
        pairs = {k: v for k, v in query.items() if v is not None}
        return f"{path}?{urlencode(pairs)}" if pairs else path

    def _send(
        self,
        method: str,
        url: str,
        body: Obj | None = None,
        *,
        content_type: str | None = None,
        timeout: float = REQUEST_TIMEOUT,
        creating: bool = False,
        refused: Callable[[dict[str, Any]], KubeError] | None = None,
    ) -> bytes:
        """One request on this thread's connection; the answer's body, or its typed error. A kept
        connection the server has closed meanwhile is opened again once (the request never left).
        ``refused`` types a 429 answer from its Status (an eviction's)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = self._headers(content_type or ("application/json" if data is not None else None))
        for attempt in (1, 2):
            conn = getattr(self._local, "conn", None)
            fresh = conn is None
            if conn is None:
                conn = self._local.conn = self._connection(REQUEST_TIMEOUT)
                self._opened.append(conn)
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                conn.request(method, url, body=data, headers=headers)
                response = conn.getresponse()
                answer = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                if fresh or attempt == 2:
                    raise
                continue
            except BaseException:
                conn.close()
                raise
            if response.status == 429 and refused is not None:
                raise refused(_status(answer))
            if response.status >= 400:
                raise self._error(response.status, answer, url, creating=creating)
            return answer
        raise AssertionError("unreachable: the second attempt returns or raises")

    @staticmethod
    def _error(code: int, answer: bytes, url: str, *, creating: bool = False) -> KubeError:
        return error_for_status(code, _status(answer), creating=creating, what=url)

    def _json(self, method: str, url: str, body: Obj | None = None, **kwargs: Any) -> Obj:
        answer = self._send(method, url, body, **kwargs)
        out = json.loads(answer)
        if not isinstance(out, dict):
            raise json.JSONDecodeError("the answer is not a JSON object", answer.decode(errors="replace"), 0)
        return out

    @staticmethod
    def _namespace(kind: Kind, namespace: str | None) -> str | None:
        """The namespace of a request for one object: "default" when a namespaced kind names none."""
        return (namespace or "default") if kind.namespaced else None

    # -- the port's verbs ------------------------------------------------------------------------

    def get(self, kind: Kind, *, name: str, namespace: str | None = None) -> Obj:
        self.calls.count("get")
        return self._json("GET", self._url(kind, self._namespace(kind, namespace), name))

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        self.calls.count("list")
        # Parsed here so a bad selector is the same ValueError as from the other adapters.
        parse_requirements(label_selector)
        parse_field_requirements(field_selector)
        url = self._url(
            kind, namespace or None, labelSelector=label_selector or None, fieldSelector=field_selector or None
        )
        return [listed_with_kind(item, kind) for item in self._json("GET", url).get("items") or []]

    def list_readonly(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        """``list()`` less each object's ``metadata.managedFields`` (the server's record of which
        writer owns which field, a third or more of an object's JSON), which no reader looks at."""
        items = self.list(kind, namespace=namespace, label_selector=label_selector, field_selector=field_selector)
        for item in items:
            (item.get("metadata") or {}).pop("managedFields", None)
        return items

    async def watch(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        timeout: float | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        self.calls.count("watch")
        parse_requirements(label_selector)
        parse_field_requirements(field_selector)
        stream = _WatchStream(self, kind, namespace or None, label_selector, field_selector, resource_version)
        deadline = None if timeout is None else time.monotonic() + timeout
        stream.start(asyncio.get_running_loop())
        try:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                try:  # asyncio.timeout, as the other adapters: wait_for on 3.11 can swallow a cancel
                    async with asyncio.timeout(remaining):
                        event = await stream.events.get()
                except TimeoutError:
                    return
                if isinstance(event, BaseException):
                    raise event
                yield event
        finally:
            stream.stop()

    def create(self, obj: Obj) -> Obj:
        self.calls.count("create")
        kind = kind_of(obj)
        namespace = self._namespace(kind, obj.get("metadata", {}).get("namespace"))
        url = self._url(kind, namespace, fieldManager=self._field_manager)
        return self._json("POST", url, obj, creating=True)

    def patch(self, kind: Kind, *, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        self.calls.count("patch")
        url = self._url(kind, self._namespace(kind, namespace), name, fieldManager=self._field_manager)
        return self._json("PATCH", url, patch, content_type="application/merge-patch+json")

    def patch_status(
        self, kind: Kind, *, name: str, status: Obj, namespace: str | None = None, strategic: bool = False
    ) -> Obj:
        self.calls.count("patch")
        url = self._url(kind, self._namespace(kind, namespace), name, "status", fieldManager=self._field_manager)
        content_type = "application/strategic-merge-patch+json" if strategic else "application/merge-patch+json"
        return self._json("PATCH", url, {"status": status}, content_type=content_type)

    def delete(self, kind: Kind, *, name: str, namespace: str | None = None) -> None:
        self.calls.count("delete")
        self._send("DELETE", self._url(kind, self._namespace(kind, namespace), name))

    def evict(self, name: str, namespace: str) -> None:
        self.calls.count("evict")
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        url = self._url(POD, namespace, name, "eviction", fieldManager=self._field_manager)
        self._send("POST", url, body, refused=lambda status: eviction_error(status, name=name, namespace=namespace))

    def logs(
        self,
        name: str,
        *,
        namespace: str,
        container: str | None = None,
        tail_lines: int | None = None,
        previous: bool = False,
    ) -> str:
        self.calls.count("logs")
        check_tail_lines(tail_lines)
        url = self._url(
            POD,
            namespace,
            name,
            "log",
            container=container,
            tailLines=tail_lines,
            previous="true" if previous else None,
        )
        return self._send("GET", url).decode(errors="replace")

    def pod_proxy_get(self, name: str, *, namespace: str, port: int, path: str) -> str:
        self.calls.count("proxy")
        url = self._url(POD, namespace, f"{name}:{port}", "proxy/" + path.lstrip("/"))
        return self._send("GET", url, timeout=PROXY_TIMEOUT).decode(errors="replace")


def _status(answer: bytes) -> dict[str, Any]:
    """The Status object of an error answer; {} where the body is none or not JSON (a proxy's page)."""
    try:
        status = json.loads(answer) if answer else {}
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


class _WatchStream:
    """One watch, read on a thread of its own: each event (or the error that ended it) is handed to
    the consumer's loop. When the server ends the stream (its request timeout), the watch is asked
    for again from the last resourceVersion seen, as lightkube's watch does."""

    def __init__(
        self,
        cluster: LeanCluster,
        kind: Kind,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        resource_version: str | None,
    ) -> None:
        self._cluster = cluster
        self._kind = kind
        self._labels = label_selector or None
        self._fields = field_selector or None
        self._namespace = namespace
        self._version = resource_version
        self.events: asyncio.Queue[WatchEvent | BaseException] = asyncio.Queue()
        self._stopped = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._run, name=f"gpuchain-watch-{kind.plural}", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread.start()

    def stop(self) -> None:
        """End the read: the thread's blocked read fails once its socket is shut, and it exits."""
        self._stopped.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _hand(self, item: WatchEvent | BaseException) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the consumer's loop has closed: nobody is left to tell
            self._stopped.set()

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                began = time.monotonic()
                if not self._read_once() and time.monotonic() - began < REWATCH_PAUSE:
                    # A stream ended at once with nothing in it: a server (or proxy) that does not
                    # hold watches open is asked again once a second, not in a tight loop.
                    self._stopped.wait(REWATCH_PAUSE)
        except BaseException as exc:  # handed to the consumer, who raises it
            if not self._stopped.is_set():
                self._hand(exc)

    def _read_once(self) -> bool:
        """One watch request read to its end; whether it brought any event."""
        cluster = self._cluster
        seen = False
        url = cluster._url(
            self._kind,
            self._namespace,
            watch="true",
            resourceVersion=self._version,
            labelSelector=self._labels,
            fieldSelector=self._fields,
        )
        conn = self._conn = cluster._connection(REQUEST_TIMEOUT)
        try:
            conn.request("GET", url, headers=cluster._headers(None))
            response = conn.getresponse()
            if response.status >= 400:
                raise cluster._error(response.status, response.read(), url)
            if conn.sock is not None:
                conn.sock.settimeout(None)  # the next event may be hours away
            for line in response:
                if self._stopped.is_set():
                    return seen
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise cluster._error(int(obj.get("code") or 500), json.dumps(obj).encode(), url)
                if event.get("type") == "BOOKMARK":
                    continue
                self._version = (obj.get("metadata") or {}).get("resourceVersion") or self._version
                self._hand(WatchEvent(event["type"], obj))
                seen = True
            return seen
        finally:
            conn.close()
