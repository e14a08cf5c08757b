"""Opening the Kubernetes API for a command, and keeping simulated GPUs off real clusters.

Every command that talks to a live cluster opens it with ``open_cluster``, so a missing or
broken kubeconfig is one line naming what was tried and the fix (exit 2), never a traceback.

Node agents default to the simulated backend so people can explore without a GPU; the guard
here makes that impossible to mistake for the real thing: results say "simulated", and nothing
simulated reaches a real cluster or a node directory unless ``--backend sim`` was typed.
typer is imported by the option builder alone: ``gpuchain node-agent`` uses the rest without it.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from gpuchain.commands._backend import BackendKind
from gpuchain.commands._output import fail

if TYPE_CHECKING:
    from gpuchain.kube.lean import LeanCluster
    from gpuchain.kube.live import LiveCluster

T = TypeVar("T")

SIMULATED = "simulated"
"""The word every result computed from simulated GPUs carries."""


def reads_a_whole_cluster(command: Callable[..., T]) -> Callable[..., T]:
    """Run ``command`` with the cyclic garbage collector off (back on when it returns or exits).

    The doctor, ``verify`` and ``doctor dump`` decode every Pod, Node and Event of the cluster and
    keep them until they finish: millions of fresh dicts, each wave of which sets off a full
    collection that finds nothing to free. Reference counting still frees everything dropped;
    only cycles wait until the command ends. Measured on the real command (``doctor --from-dump``
    of a 2,000-node, 15,020-pod dump, three runs alternated): 6.1-6.8 s with the collector,
    3.9-4.5 s without, the same peak RSS (363-364 MiB).
    """

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> T:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return command(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return run


def _tried(kubeconfig: str | None, context: str | None) -> str:
    """What the client looked at, in the order it looks."""
    if kubeconfig:
        where = f"kubeconfig {kubeconfig}"
    else:
        in_cluster = "set" if os.environ.get("KUBERNETES_SERVICE_HOST") else "not in a pod"
        env = os.environ.get("KUBECONFIG")
        where = (
            f"in-cluster config ({in_cluster}), $KUBECONFIG ({env or 'unset'}), {os.path.expanduser('~/.kube/config')}"
        )
    return where + (f", context {context}" if context else "")


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"the kubeconfig has no {exc.args[0]!r} section"
    import yaml  # loaded already: the kubeconfig reader uses it

    if isinstance(exc, yaml.YAMLError):
        return f"the kubeconfig is not valid YAML ({str(exc).splitlines()[0]})"
    return str(exc) or type(exc).__name__


def _no_configuration(exc: Exception, tried: str, hint: str) -> NoReturn:
    """Exit 2 with the one line for a Kubernetes API configuration that cannot be used: why, what was tried, the
    fix (``hint`` adds a command's own way out)."""
    fix = "run in a pod with a service account, set KUBECONFIG, or put a kubeconfig at ~/.kube/config"
    fail(f"no Kubernetes API configuration: {_reason(exc)}; tried {tried}. Fix: {fix}{'; ' + hint if hint else ''}")


def open_cluster(
    kubeconfig: str | None = None, *, context: str | None = None, server: str | None = None, hint: str = ""
) -> LiveCluster:
    """The live cluster: ``server`` (an unauthenticated URL, for test servers), else the kubeconfig
    file, else in-cluster config, ``$KUBECONFIG`` or ``~/.kube/config``. No usable configuration
    exits 2 with one line: why, what was tried, and the fix (``hint`` adds a command's own way out).
    """
    import yaml
    from lightkube import ConfigError

    from gpuchain.kube.live import LiveCluster

    guarded: type[LiveCluster] = _guarded_class(LiveCluster)
    try:
        cluster = guarded.from_url(server) if server else guarded.from_kubeconfig(kubeconfig, context=context)
    except (ConfigError, OSError, ValueError, LookupError, TypeError, yaml.YAMLError) as exc:
        _no_configuration(exc, _tried(kubeconfig, context), hint)
    setattr(cluster, "tried", f"server {server}" if server else _tried(kubeconfig, context))  # noqa: B010
    return cluster


def open_node_cluster(*, hint: str = "") -> LeanCluster | LiveCluster:
    """The live cluster of a process on a node (the node agent): `LeanCluster`, the standard
    library's client, from in-cluster config, ``$KUBECONFIG`` or ``~/.kube/config`` as
    ``open_cluster`` looks; where that configuration needs the full client (an exec plugin, an auth
    provider, a proxy), ``open_cluster``'s, saying why once. Errors as ``open_cluster``'s."""
    import logging

    import yaml

    from gpuchain.kube import lean

    try:
        endpoint = lean.endpoint_from_env()
    except lean.Unsupported as why:
        logging.getLogger("gpuchain.kube").info("using the full Kubernetes client: %s", why)
        return open_cluster(hint=hint)
    except (OSError, ValueError, LookupError, TypeError, yaml.YAMLError) as exc:
        _no_configuration(exc, _tried(None, None), hint)
    guarded: type[lean.LeanCluster] = _guarded_class(lean.LeanCluster)
    cluster = guarded(endpoint, "gpuchain")
    setattr(cluster, "tried", _tried(None, None))  # noqa: B010
    return cluster


#: What each unreachable reason asks the user to check.
_CHECK = (
    "check that the cluster is up, that the kubeconfig's server address and port are right "
    "(kubectl cluster-info), and any VPN, proxy or firewall in between"
)


def _server_of(cluster: Any) -> str:
    """The live cluster's server address; "the API server" for a cluster that has none to name."""
    return str(getattr(cluster, "server", "") or "the API server")


def _transport_reason(exc: BaseException) -> str:
    """The first line of a transport error, with the class name when it says nothing else."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    name = type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    if "name or service not known" in text.lower() or "nodename nor servname" in text.lower():
        return "host name not resolved"
    if "timed out" in text.lower() or "Timeout" in name:
        return "timed out"
    if "certificate" in text.lower() or "SSL" in text:
        return f"TLS failed ({text})"
    return f"{name}: {text}" if text else name


def unreachable(cluster: Any, *, what: str, exc: BaseException) -> Exception:
    """The one-line error for a server that did not answer as a Kubernetes API server."""
    from gpuchain.kube.errors import UnreachableError

    tried = getattr(cluster, "tried", "")
    server = _server_of(cluster)
    if isinstance(exc, ValueError):
        reason = f"it answered {what} with something that is not Kubernetes API JSON ({str(exc).splitlines()[0]})"
        check = "check that the kubeconfig's server address points at the API server, not a proxy or web page"
    else:
        reason = f"{what} failed: {_transport_reason(exc)}"
        check = _CHECK
    return UnreachableError(
        f"cannot talk to the Kubernetes API server at {server}: {reason}; tried {tried or server}. Fix: {check}"
    )


@functools.cache
def _guarded_class(base: type[Any]) -> type[Any]:
    """A live adapter (LiveCluster, LeanCluster) whose transport failures and non-API replies are one line.

    A server that has never answered this process (down, wrong address, not an API server) ends
    the command: the one line on stderr, exit 2, whatever the command. Once it has answered, a
    later failure is an `UnreachableError` (a KubeError) with the same line, so long-running agents
    that retry on KubeError keep retrying through a control-plane restart."""
    failures = _transport_failures(base)

    def failed(self: Any, what: str, exc: BaseException) -> Exception:
        error = unreachable(self, what=what, exc=exc)
        if not self.answered:
            fail(str(error))
        return error

    def guard(name: str, method: Callable[..., T]) -> Callable[..., T]:
        def call(self: Any, *args: Any, **kwargs: Any) -> T:
            try:
                result = method(self, *args, **kwargs)
            except failures as exc:
                raise failed(self, f"{name} {args[0] if args else ''}".strip(), exc) from None
            self.answered = True
            return result

        return call

    async def watch(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        try:
            async for event in base.watch(self, *args, **kwargs):
                self.answered = True
                yield event
        except failures as exc:
            raise failed(self, f"watch {args[0] if args else ''}".strip(), exc) from None

    methods: dict[str, Any] = {
        name: guard(name, getattr(base, name))
        for name in (
            "get",
            "list",
            "list_readonly",
            "create",
            "patch",
            "patch_status",
            "delete",
            "logs",
            "evict",
            "pod_proxy_get",
        )
    }
    methods["watch"] = watch
    methods["tried"] = ""
    methods["answered"] = False
    return type(f"Guarded{base.__name__}", (base,), methods)


def _transport_failures(base: type) -> tuple[type[BaseException], ...]:
    """What ``base``'s requests raise when the server did not answer as a Kubernetes API server."""
    from gpuchain.kube.lean import TRANSPORT_FAILURES, LeanCluster

    if issubclass(base, LeanCluster):
        return TRANSPORT_FAILURES
    import json

    import httpx2
    import msgspec

    return (httpx2.TransportError, httpx2.DecodingError, json.JSONDecodeError, msgspec.DecodeError)


def node_backend_option() -> Any:
    """``--backend`` for node agents: None when not given, so an explicit ``sim`` is told from the default."""
    import typer

    return typer.Option(
        None,
        "--backend",
        "-b",
        help="nvml: this node's GPUs; sim (the default): simulated GPUs, results marked simulated and "
        "never written to a cluster or the node's directories unless --backend sim is given.",
        show_default=False,
    )


@dataclass(frozen=True)
class BackendChoice:
    """The backend a node agent runs on, and whether the user asked for it."""

    kind: BackendKind
    explicit: bool

    @property
    def simulated(self) -> bool:
        """Results come from simulated GPUs."""
        return self.kind is BackendKind.sim

    @property
    def implicit_sim(self) -> bool:
        """Simulated only because nobody chose: such results must not reach real places."""
        return self.simulated and not self.explicit


def resolve_backend(kind: BackendKind | None) -> BackendChoice:
    """``--backend`` as given (explicit) or the simulated default."""
    return BackendChoice(kind or BackendKind.sim, kind is not None)


def refuse_implicit_sim(choice: BackendChoice, *, target: str, elsewhere: str = "") -> None:
    """Exit 2 when simulated GPU results would be written to ``target`` (a live cluster, a node
    directory) only because ``--backend`` defaulted to sim: a real node must not look healthy
    because of GPUs that do not exist. ``elsewhere`` names the command's harmless alternative."""
    if choice.implicit_sim:
        fail(
            f"refusing to write simulated GPU results to {target}: --backend defaults to sim (simulated GPUs). "
            "On a GPU node pass --backend nvml; to write simulated results there on purpose pass --backend sim"
            + (f"; to explore, {elsewhere}" if elsewhere else "")
        )


def mark(text: str, choice: BackendChoice) -> str:
    """``text`` with " (simulated)" appended when the GPUs behind it are simulated."""
    return f"{text} ({SIMULATED})" if choice.simulated else text
