"""Opening the Kubernetes API for a command, and keeping simulated GPUs off real clusters.

Every command that talks to a live cluster opens it with ``open_cluster``, so a missing or
broken kubeconfig is one line naming what was tried and the fix (exit 2), never a traceback.

Node agents default to the simulated backend so people can explore without a GPU; the guard
here makes that impossible to mistake for the real thing: results say "simulated", and nothing
simulated reaches a real cluster or a node directory unless ``--backend sim`` was typed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer
import yaml

from gpuchain.commands._backend import BackendKind
from gpuchain.commands._output import fail

if TYPE_CHECKING:
    from gpuchain.kube import LiveCluster

SIMULATED = "simulated"
"""The word every result computed from simulated GPUs carries."""


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
    if isinstance(exc, yaml.YAMLError):
        return f"the kubeconfig is not valid YAML ({str(exc).splitlines()[0]})"
    return str(exc) or type(exc).__name__


def open_cluster(
    kubeconfig: str | None = None, context: str | None = None, server: str | None = None, hint: str = ""
) -> LiveCluster:
    """The live cluster: ``server`` (an unauthenticated URL, for test servers), else the kubeconfig
    file, else in-cluster config, ``$KUBECONFIG`` or ``~/.kube/config``. No usable configuration
    exits 2 with one line: why, what was tried, and the fix (``hint`` adds a command's own way out).
    """
    from lightkube import ConfigError

    from gpuchain.kube import LiveCluster

    try:
        if server:
            return LiveCluster.from_url(server)
        return LiveCluster.from_kubeconfig(kubeconfig, context)
    except (ConfigError, OSError, ValueError, LookupError, TypeError, yaml.YAMLError) as exc:
        fix = "run in a pod with a service account, set KUBECONFIG, or put a kubeconfig at ~/.kube/config"
        fail(
            f"no Kubernetes API configuration: {_reason(exc)}; tried {_tried(kubeconfig, context)}. "
            f"Fix: {fix}{'; ' + hint if hint else ''}"
        )


def node_backend_option() -> Any:
    """``--backend`` for node agents: None when not given, so an explicit ``sim`` is told from the default."""
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


def refuse_implicit_sim(choice: BackendChoice, target: str, elsewhere: str = "") -> None:
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
