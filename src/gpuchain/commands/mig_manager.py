"""`gpuchain mig-manager`: the node agent that applies the layout named by the node's
`nvidia.com/mig.config` label and reports it in `nvidia.com/mig.config.state`.

It runs in the cluster (a DaemonSet on MIG-capable nodes) with `--backend nvml`. It always writes
to a live cluster, so the simulated backend (the default elsewhere) must be asked for with
`--backend sim` (useful against a test cluster); its printed state then says "simulated".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import typer

from gpuchain.agent.build import serve_alone
from gpuchain.agent.node import Node, RoleError
from gpuchain.agent.roles import mig_manager as mig_manager_role
from gpuchain.agent.settings import MigManagerSettings, NodeSettings
from gpuchain.commands._agent import nvml_release_dir_option
from gpuchain.commands._backend import (
    BackendKind,
    backend_or_fail,
    preset_option,
    topology_option,
)
from gpuchain.commands._cluster import (
    SIMULATED,
    mark,
    node_backend_option,
    open_node_cluster,
    refuse_implicit_sim,
    resolve_backend,
)
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import LogFormat, configure_logging, emit, fail, log_format_option, output_option
from gpuchain.commands.mig import mig_config
from gpuchain.common.numbers import positive_seconds
from gpuchain.kube import KubeError
from gpuchain.mig.agent import OPERANDS
from gpuchain.mig.manager import RESYNC_SECONDS

log = logging.getLogger(__name__)


def mig_manager(
    node: str = typer.Option(..., "--node", envvar="NODE_NAME", help="This node's name (downward API)."),
    *,
    config_file: str | None = typer.Option(
        None, "-f", "--config-file", envvar="CONFIG_FILE", help="mig-parted v1 config (default: built-in layouts)."
    ),
    evict: bool = typer.Option(
        False, "--evict", help="Evict pods that still use GPUs (Eviction API, PDBs honoured) instead of failing."
    ),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait for pods to go before failing."),
    interval: float = typer.Option(
        2.0,
        "--interval",
        help="Seconds between eviction retries (--evict), and before retrying after a Kubernetes API error.",
    ),
    resync: float = typer.Option(
        RESYNC_SECONDS,
        "--resync-seconds",
        help="A safety-net look at the node when its watches brought nothing for this long "
        "(it reacts to changes through watches, never by polling).",
    ),
    operands: str = typer.Option(
        ",".join(OPERANDS), "--operands", help="Deploy-label suffixes of the GPU operands to pause."
    ),
    default_config: str | None = typer.Option(
        None,
        "--default-config",
        envvar="DEFAULT_MIG_CONFIG",
        help="Layout for a node without a nvidia.com/mig.config label (migManager.config.default); "
        "default: leave such nodes alone.",
    ),
    once: bool = typer.Option(False, "--once", help="Reconcile until the agent waits, print its state, exit."),
    backend: BackendKind | None = node_backend_option(),
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    release_dir: str = nvml_release_dir_option(),
    output: OutputFormat = output_option(),
    log_format: LogFormat = log_format_option(),
) -> None:
    """Watch this node's `nvidia.com/mig.config` label and apply that MIG layout.

    Walks `nvidia.com/mig.config.state` pending -> success | failed | rebooting; pauses the GPU
    operands (deploy labels `paused-for-mig-change`) and always restores them; the reason for a
    failure is in the node annotation `nvidia.com/mig.config.state.reason` and a node Event.
    """
    try:
        positive_seconds("--interval", interval)
        positive_seconds("--resync-seconds", resync)
    except ValueError as exc:
        fail(str(exc))
    choice = resolve_backend(backend)
    refuse_implicit_sim(choice, target=f"node {node} of the live cluster (nvidia.com/mig.config.state)")
    config = mig_config(config_file)
    settings = MigManagerSettings(
        config_file=config_file,
        evict=evict,
        timeout=timeout,
        interval=interval,
        resync=resync,
        operands=tuple(o for o in operands.split(",") if o),
        default_config=default_config,
    )
    gpus = backend_or_fail(choice.kind, preset=preset, topology=topology)
    cluster = open_node_cluster(hint="the MIG manager runs in-cluster as a DaemonSet")
    manager_node = Node(gpus, settings=NodeSettings(node_name=node, release_dir=release_dir), cluster=lambda: cluster)
    try:
        try:
            manager = mig_manager_role.manager_of(settings, node=manager_node, config=config)
        except RoleError as exc:
            fail(str(exc), code=exc.code)
        if once:
            try:
                m = manager.reconcile()
            except KubeError as exc:
                fail(str(exc), code=1)
            data: dict[str, Any] = {"node": node, "phase": m.phase, "config": m.config, "outcome": m.outcome}
            data["message"] = mark(m.message, choice) if m.message else m.message
            data[SIMULATED] = choice.simulated
            line = mark(f"{node}: {m.phase} {m.config or '-'} {m.outcome or ''} {m.message}".rstrip(), choice)
            from rich.text import Text

            emit(data, fmt=output, table=lambda: Text(line))
            return
        configure_logging(logging.INFO, log_format)
        if choice.simulated:
            log.warning("MIG manager on SIMULATED GPUs: layouts change no real GPU")

        async def role(stop: asyncio.Event, started: Callable[[], None]) -> None:
            started()
            await mig_manager_role.serve(settings, manager=manager, stop=stop)

        asyncio.run(serve_alone(role, node=manager_node, component="mig-manager"))
        log.info("MIG manager stopped")
    finally:
        asyncio.run(manager_node.close())


def register(app: typer.Typer) -> None:
    app.command("mig-manager")(mig_manager)
