"""`gpuchain mig-manager`: the node agent that applies the layout named by the node's
`nvidia.com/mig.config` label and reports it in `nvidia.com/mig.config.state`.

It runs in the cluster (a DaemonSet on MIG-capable nodes) with `--backend nvml`; with the
default sim backend it changes simulated GPUs, which is useful against a test cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import typer
from rich.text import Text

from gpuchain.commands._backend import (
    BACKEND_ERRORS,
    BackendKind,
    backend_option,
    open_backend,
    preset_option,
    topology_option,
)
from gpuchain.commands._output import OutputFormat, emit, fail, output_option
from gpuchain.commands.mig import mig_config
from gpuchain.kube import KubeError
from gpuchain.mig.agent import OPERANDS, Policy
from gpuchain.mig.manager import MigManager


def mig_manager(
    node: str = typer.Option(..., "--node", envvar="NODE_NAME", help="This node's name (downward API)."),
    config_file: str | None = typer.Option(
        None, "-f", "--config-file", envvar="CONFIG_FILE", help="mig-parted v1 config (default: built-in layouts)."
    ),
    evict: bool = typer.Option(
        False, "--evict", help="Evict pods that still use GPUs (Eviction API, PDBs honoured) instead of failing."
    ),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait for pods to go before failing."),
    interval: float = typer.Option(2.0, "--interval", help="Seconds between checks when nothing changes."),
    operands: str = typer.Option(
        ",".join(OPERANDS), "--operands", help="Deploy-label suffixes of the GPU operands to pause."
    ),
    once: bool = typer.Option(False, "--once", help="Reconcile until the agent waits, print its state, exit."),
    backend: BackendKind = backend_option(),
    preset: str | None = preset_option(),
    topology: str | None = topology_option(),
    output: OutputFormat = output_option(),
) -> None:
    """Watch this node's `nvidia.com/mig.config` label and apply that MIG layout.

    Walks `nvidia.com/mig.config.state` pending -> success | failed | rebooting; pauses the GPU
    operands (deploy labels `paused-for-mig-change`) and always restores them; the reason for a
    failure is in the node annotation `nvidia.com/mig.config.state.reason` and a node Event.
    """
    config = mig_config(config_file)
    policy = Policy(timeout_s=timeout, evict=evict, operands=tuple(o for o in operands.split(",") if o))
    from gpuchain.kube import LiveCluster

    try:
        cluster = LiveCluster()
    except Exception as exc:
        fail(f"cannot reach the Kubernetes API: {exc}", code=1)
    try:
        gpus = open_backend(backend, preset, topology)
    except BACKEND_ERRORS as exc:
        fail(str(exc))
    manager = MigManager(cluster, gpus, node, config, policy)
    try:
        if once:
            try:
                m = manager.reconcile()
            except KubeError as exc:
                fail(str(exc), code=1)
            data: dict[str, Any] = {"node": node, "phase": m.phase, "config": m.config, "outcome": m.outcome}
            data["message"] = m.message
            emit(data, output, lambda: Text(f"{node}: {m.phase} {m.config or '-'} {m.outcome or ''} {m.message}"))
            return
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(manager.run(interval))
    finally:
        gpus.close()
        cluster.close()


def register(app: typer.Typer) -> None:
    app.command("mig-manager")(mig_manager)
