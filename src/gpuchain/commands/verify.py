"""`gpuchain verify`: the production checklist for a GPU cluster, pass/fail with evidence per item.

On a live cluster the test pod is a real ``gpu-test`` pod (created, waited for, its log read,
deleted); with ``--scenario`` it is admitted by the simulator's kubelet peer and nvidia-smi's
answer comes from the simulated GPUs. Exit code 1 when an item fails.
"""

from __future__ import annotations

import asyncio
import sys

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuchain.commands._cluster import reads_a_whole_cluster
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import emit, fail, output_option
from gpuchain.commands.doctor import context_option, kubeconfig_option, open_target, reading_progress, scenario_option
from gpuchain.doctor.snapshot import STEPS, gather
from gpuchain.doctor.verify import DEFAULT_CUDA_IMAGE, Checklist, PodOutcome, Status, checklist, live_test_pod
from gpuchain.kube import KubeError
from gpuchain.sim.testpod import run_test_pod

MARK = {Status.PASS: ("PASS", "bold green"), Status.FAIL: ("FAIL", "bold red"), Status.SKIP: ("skip", "dim")}


def _render(result: Checklist, where: str) -> RenderableType:
    table = Table(show_edge=False, padding=(0, 1), title=f"production checklist: {where}", title_justify="left")
    table.add_column("", no_wrap=True)
    table.add_column("item", no_wrap=True, style="bold")
    table.add_column("evidence")
    for item in result.items:
        label, style = MARK[item.status]
        evidence = Text("\n".join(item.evidence))
        evidence.append(f"\nby hand: {item.command}", style="dim")
        table.add_row(Text(label, style=style), item.title, evidence)
    verdict = (
        Text("all checks pass", style="bold green") if result.passed else Text("checklist failed", style="bold red")
    )
    return Group(table, verdict)


def register(app: typer.Typer) -> None:
    """Add `gpuchain verify`."""

    @app.command("verify")
    @reads_a_whole_cluster
    def verify(
        scenario: str | None = scenario_option(),
        kubeconfig: str | None = kubeconfig_option(),
        context: str | None = context_option(),
        namespace: str | None = typer.Option(None, "--namespace", "-n", help="Operator namespace."),
        cuda_image: str = typer.Option(DEFAULT_CUDA_IMAGE, "--cuda-image", help="The CUDA image workloads use."),
        test_pod: bool = typer.Option(True, "--test-pod/--no-test-pod", help="Run the gpu-test pod (nvidia-smi)."),
        timeout: float = typer.Option(120.0, "--timeout", min=1.0, help="Seconds to wait for the test pod (live)."),
        output: OutputFormat = output_option(),
    ) -> None:
        """Run the production checklist on your cluster, each item pass/fail with evidence.

        Items: driver vs CUDA image, toolkit, device plugin count, test pod, exporter ready, MIG names.
        """
        target = open_target(scenario, kubeconfig=kubeconfig, context=context)
        show = output is OutputFormat.table and sys.stderr.isatty()
        try:
            with reading_progress(show, len(STEPS)) as step:
                snap = gather(target.cluster, namespace=namespace, progress=step)
            outcome: PodOutcome | None = None
            if test_pod:
                if target.sim is not None:
                    outcome = asyncio.run(run_test_pod(target.sim))
                else:
                    outcome = live_test_pod(target.cluster, reader=target.reader, image=cuda_image, timeout=timeout)
        except KubeError as exc:
            fail(f"reading the cluster failed: {exc}")
        result = checklist(snap, cuda_image=cuda_image, pod=outcome)
        emit(result, fmt=output, table=lambda: _render(result, target.where))
        if not result.passed:
            raise typer.Exit(1)
