"""`gpuchain operator run|status|render|crd|import`: the ClusterPolicy operator, its status, what it would
deploy, and the import of NVIDIA's ClusterPolicy."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Group
from rich.table import Table

from gpuchain.commands._cluster import open_cluster
from gpuchain.commands._format import OutputFormat
from gpuchain.commands._output import (
    LogFormat,
    configure_logging,
    emit,
    emit_data,
    err_console,
    fail,
    log_format_option,
    output_option,
    to_yaml,
    to_yaml_all,
)
from gpuchain.common.yamlfile import ConfigFileError, load_yaml_file
from gpuchain.kube import CLUSTER_POLICY, KubeError
from gpuchain.operator.crd import crd
from gpuchain.operator.desired import desired
from gpuchain.operator.manifests import manifest_problems, name_problem
from gpuchain.operator.operands import Facts
from gpuchain.operator.policy import NvidiaPolicyDocument, PolicyDocument
from gpuchain.operator.reconcile import DEFAULT_NAMESPACE
from gpuchain.operator.runtime import RuntimeConfig, run

if TYPE_CHECKING:
    from gpuchain.operator.migrate import ImportResult

operator_app = typer.Typer(help="The gpuchain operator (ClusterPolicy gpuchain.io/v1).", no_args_is_help=True)


class ManifestFormat(enum.StrEnum):
    """How manifests print: YAML documents (for kubectl apply -f -) or a JSON list."""

    yaml = "yaml"
    json = "json"


def _manifest_option(help_text: str) -> Any:
    return typer.Option(ManifestFormat.yaml, "-o", "--output", help=help_text)


def _kubeconfig_option() -> Any:
    return typer.Option(
        None, "--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG, ~/.kube/config)."
    )


def _context_option() -> Any:
    return typer.Option(None, "--context", help="kubeconfig context to use.")


def _manifest_dump(objs: list[dict[str, Any]], fmt: ManifestFormat) -> None:
    if fmt is ManifestFormat.json:
        sys.stdout.write(json.dumps(objs, indent=2) + "\n")
    else:
        sys.stdout.write(to_yaml_all(objs))


@operator_app.command("run")
def run_cmd(
    namespace: str = typer.Option(DEFAULT_NAMESPACE, "--namespace", "-n", help="Namespace of the operand DaemonSets."),
    *,
    server: str | None = typer.Option(None, "--server", help="API server URL without auth (tests)."),
    min_interval: float = typer.Option(2.0, "--min-interval", help="Least seconds between two reconciles."),
    resync: float = typer.Option(60.0, "--resync", help="Reconcile at least this often (seconds)."),
    log_format: LogFormat = log_format_option(),
) -> None:
    """Watch ClusterPolicies, nodes and operands; reconcile until interrupted."""
    # No --kubeconfig here: kopf logs in on its own (in-cluster or the default kubeconfig), so both
    # clients must find the same configuration.
    _namespace(namespace)
    cluster = open_cluster(server=server, hint="the operator normally runs in-cluster")
    # kopf retries an unreachable server forever in its log; ask once first, so a server never
    # reached is one line and exit 2 (open_cluster's guard) like every other cluster command.
    # A KubeError is an answer (a missing CRD or an RBAC refusal is the operator's to report as it runs).
    with contextlib.suppress(KubeError):
        cluster.list(CLUSTER_POLICY)
    configure_logging(logging.INFO, log_format)
    config = RuntimeConfig(namespace=namespace, min_interval=min_interval, resync=resync, server=server)
    asyncio.run(run(cluster, config=config))


def _namespace(namespace: str) -> str:
    why = name_problem(namespace, "label")
    if why:
        fail(f"--namespace: {why}")
    return namespace


def _read_policy(policy_file: Path) -> PolicyDocument:
    try:
        return load_yaml_file(PolicyDocument, path=policy_file)
    except ConfigFileError as exc:
        fail(str(exc), also=exc.others)


@operator_app.command("render")
def render(
    policy_file: Path | None = typer.Option(None, "--policy", "-f", help="ClusterPolicy YAML (default: all defaults)."),
    *,
    namespace: str = typer.Option(DEFAULT_NAMESPACE, "--namespace", "-n", help="Namespace of the operand DaemonSets."),
    output: ManifestFormat = _manifest_option("yaml (multi-document) or json."),
    mps: bool = typer.Option(
        False,
        "--mps",
        help="Render as when the device plugin's ConfigMap (devicePlugin.config.name) has sharing.mps: "
        "the device plugin then runs the MPS control daemons (the operator reads the ConfigMap).",
    ),
) -> None:
    """Print the manifests the operator would apply for a ClusterPolicy (no cluster needed).

    Every manifest is checked as the API server would check it before anything is printed.
    """
    _namespace(namespace)
    doc = PolicyDocument() if policy_file is None else _read_policy(policy_file)
    objs = desired(doc.policy(), Facts(namespace=namespace, policy_name=doc.name, mps=mps))
    problems = manifest_problems(objs)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        fail(
            f"{policy_file or 'default policy'}: the rendered manifests would be refused: {problems[0]}{more}",
            also=problems[1:],
        )
    _manifest_dump(objs, output)


def _nvidia_from_cluster(
    kubeconfig: str | None, context: str | None, server: str | None, name: str | None
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    from gpuchain.kube import NODE, NotFoundError
    from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER
    from gpuchain.operator.reconcile import active_policy

    cluster = open_cluster(
        kubeconfig, context=context, server=server, hint="or pass -f with NVIDIA's ClusterPolicy saved as YAML"
    )
    try:
        policies = cluster.list(NVIDIA_CLUSTER_POLICY)
    except NotFoundError:
        policies = []
    except KubeError as exc:
        fail(f"cannot list clusterpolicies.nvidia.com: {exc}", code=1)
    chosen = next((p for p in policies if p["metadata"]["name"] == name), None) if name else active_policy(policies)
    if chosen is None:
        fail(
            f"no nvidia.com ClusterPolicy{' ' + repr(name) if name else ''} in the cluster: "
            "is NVIDIA's GPU Operator installed?"
        )
    try:
        drivers = cluster.list(NVIDIA_DRIVER)
    except NotFoundError:
        drivers = []
    return chosen, drivers, cluster.list(NODE)


def _import_table(result: ImportResult) -> Table:
    table = Table(title="Import of NVIDIA's ClusterPolicy", title_justify="left")
    for col in ("Outcome", "Key", "What", "Detail"):
        table.add_column(col, overflow="fold")
    for e in result.entries:
        table.add_row(e.outcome, e.key, e.what, e.detail)
    return table


@operator_app.command("import")
def import_cmd(
    policy_file: Path | None = typer.Option(
        None, "--file", "-f", help="NVIDIA's ClusterPolicy (nvidia.com/v1) as YAML."
    ),
    *,
    from_cluster: bool = typer.Option(False, "--from-cluster", help="Read NVIDIA's ClusterPolicy from the cluster."),
    name: str | None = typer.Option(None, "--name", help="Which nvidia.com ClusterPolicy (default: the active one)."),
    write: Path | None = typer.Option(
        None, "--write", "-w", help="Write gpuchain's ClusterPolicy here (default: stdout)."
    ),
    server: str | None = typer.Option(None, "--server", help="API server URL without auth (tests)."),
    kubeconfig: str | None = _kubeconfig_option(),
    context: str | None = _context_option(),
    output: OutputFormat = output_option(),
) -> None:
    """Turn NVIDIA's ClusterPolicy into gpuchain's, reporting what maps, what is ignored and what blocks.

    Blocking features are switched off in the written policy; the exit status is then 1, so a
    script notices. With -o json or yaml the report (with the policy) goes to stdout.
    """
    from gpuchain.common.files import atomic_write
    from gpuchain.operator.migrate import PolicyImportError, import_policy

    if (policy_file is None) == (not (from_cluster or server)):
        fail("say where NVIDIA's ClusterPolicy is: -f FILE or --from-cluster")
    drivers: list[dict[str, Any]] = []
    nodes: list[dict[str, Any]] = []
    if policy_file is not None:
        try:
            nvidia = load_yaml_file(NvidiaPolicyDocument, path=policy_file).model_dump()
        except ConfigFileError as exc:
            fail(str(exc), also=exc.others)
    else:
        nvidia, drivers, nodes = _nvidia_from_cluster(kubeconfig, context, server, name)
    try:
        result = import_policy(nvidia, drivers=drivers, nodes=nodes)
    except PolicyImportError as exc:
        fail(
            f"{policy_file or 'clusterpolicies.nvidia.com'}: {exc.problems[0]}"
            + (f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else "")
        )
    text = to_yaml(result.policy)
    if write is not None:
        atomic_write(write, data=text)
    if output.for_people:
        if write is None:
            sys.stdout.write(text)
        err_console.print(_import_table(result))
        verdict = (
            f"{len(result.of('blocks'))} blocking: switched off in the written policy"
            if result.of("blocks")
            else "nothing blocks"
        )
        err_console.print(f"{len(result.of('maps'))} map, {len(result.of('ignored'))} ignored, {verdict}")
    else:
        emit_data(result.to_dict(), output)
    if result.of("blocks"):
        raise typer.Exit(1)


def _status_table(policies: list[dict[str, Any]]) -> Group:
    parts: list[Table] = []
    for p in policies:
        status = p.get("status") or {}
        ready: dict[str, Any] = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), {})
        title = (
            f"ClusterPolicy {p['metadata']['name']}: {status.get('state', 'unknown')}, "
            f"{status.get('gpuNodes', '?')} GPU node(s); {ready.get('reason', '')} {ready.get('message', '')}"
        )
        table = Table(title=title, title_justify="left")
        for col in ("Operand", "State", "Ready", "Reason", "Message"):
            table.add_column(col)
        for name, op in (status.get("operands") or {}).items():
            table.add_row(name, op.get("state", ""), op.get("ready", ""), op.get("reason", ""), op.get("message", ""))
        parts.append(table)
    return Group(*parts)


@operator_app.command("status")
def status_cmd(
    server: str | None = typer.Option(None, "--server", help="API server URL without auth (tests)."),
    *,
    kubeconfig: str | None = _kubeconfig_option(),
    context: str | None = _context_option(),
    output: OutputFormat = output_option(),
) -> None:
    """Show each ClusterPolicy's state, conditions and per-operand status."""
    cluster = open_cluster(kubeconfig, context=context, server=server, hint="or pass --kubeconfig")
    try:
        policies = cluster.list(CLUSTER_POLICY)
    except KubeError as exc:
        fail(f"cannot list clusterpolicies.gpuchain.io: {exc}", code=1)
    if not policies:
        fail("no ClusterPolicy: install the chart or `kubectl apply` one", code=1)
    data = [{"name": p["metadata"]["name"], **(p.get("status") or {})} for p in policies]
    emit(data, fmt=output, table=lambda: _status_table(policies))


@operator_app.command("crd")
def crd_cmd(output: ManifestFormat = _manifest_option("yaml or json.")) -> None:
    """Print the ClusterPolicy CustomResourceDefinition."""
    _manifest_dump([crd()], output)


def register(app: typer.Typer) -> None:
    app.add_typer(operator_app, name="operator")
