"""The doctor offline: read (and write) the directory ``kubectl cluster-info dump`` writes.

``kubectl cluster-info dump --all-namespaces --output-directory=DIR`` (kubernetes/kubernetes,
staging/src/k8s.io/kubectl/pkg/cmd/clusterinfo/clusterinfo_dump.go) writes ``DIR/nodes.json``
and, per namespace, ``DIR/<ns>/{events,replication-controllers,services,daemonsets,deployments,
replicasets,pods}.json`` (List objects; ``.yaml`` with ``-o yaml``) and ``DIR/<ns>/<pod>/logs.txt``,
every init container's then every container's log between the lines
``==== START logs for container <c> of pod <ns>/<pod> ====`` and ``==== END logs ... ====``
(a log it could not read is the single line ``Request log error: ...``).

Optional extras in the same List style, which kubectl does not write but the doctor reads when
present: ``DIR/clusterpolicies.json`` (gpuchain.io or nvidia.com items), ``DIR/nvidiadrivers.json``,
``DIR/runtimeclasses.json``, ``DIR/resourceslices.json`` (DRA), ``DIR/poddisruptionbudgets.json`` (every namespace's:
what a drain's evictions obey), ``DIR/<ns>/configmaps.json`` and
``DIR/<ns>/<pod>/previous-logs.txt``
(logs.txt's layout, the last terminated run of each container that restarted: kubectl's dump has
only the current run's log, so from a plain kubectl dump a container that crashed once and runs
again shows only its fresh start), and ``DIR/<ns>/<pod>/metrics.txt``, an exporter pod's
``/metrics`` answer, whose modification time is when it was read (``curl -o`` writes it then; the
doctor judges its trust signals, `gpuchain.doctor.trust`). A dump without them still works;
the checks that need them say nothing rather than guess. ``write_dump`` writes the layout, extras
included, from any `Cluster`, so a user can attach it to a ticket.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from gpuchain.common.inputfile import ConfigFileError, read_input_bytes, read_input_text
from gpuchain.doctor.admission_reasons import refused_in
from gpuchain.doctor.finished import split_finished
from gpuchain.doctor.logs import cluster_log_reader, cluster_scraper
from gpuchain.doctor.snapshot import MAX_SCRAPES, gather, list_if_served, read_pdbs, scrape_candidates, with_logs
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER, detect
from gpuchain.doctor.structs import LogKey, Scrape, Snapshot
from gpuchain.dra.kinds import RESOURCE_SLICE
from gpuchain.kube import CLUSTER_POLICY, CONFIGMAP, DAEMONSET, DEPLOYMENT, EVENT, NODE, POD, RUNTIME_CLASS, SERVICE
from gpuchain.kube.errors import KubeError
from gpuchain.kube.kinds import PDB, Kind, register_kind
from gpuchain.kube.objects import Obj, is_ready, name_of, namespace_of
from gpuchain.kube.port import Cluster

REPLICASET = register_kind(Kind(api_version="apps/v1", kind="ReplicaSet", plural="replicasets", namespaced=True))
REPLICATION_CONTROLLER = register_kind(
    Kind(api_version="v1", kind="ReplicationController", plural="replicationcontrollers", namespaced=True)
)

#: File stem (as kubectl names it) -> the kind of its items.
PER_NAMESPACE = {
    "events": EVENT,
    "replication-controllers": REPLICATION_CONTROLLER,
    "services": SERVICE,
    "daemonsets": DAEMONSET,
    "deployments": DEPLOYMENT,
    "replicasets": REPLICASET,
    "pods": POD,
}
START = re.compile(r"^==== START logs for container (\S+) of pod ([^/\s]+)/(\S+) ====$")
END = re.compile(r"^==== END logs for container (\S+) of pod ([^/\s]+)/(\S+) ====$")
LOG_ERROR = ("Request log error: ", "Create log request error: ")
METRICS_FILE = "metrics.txt"
#: Lines of each container log ``write_dump`` keeps (kubectl keeps all; the doctor reads the tail).
DUMP_TAIL = 500


class DumpError(ValueError):
    """A dump file the doctor cannot read; the message names the file and what is wrong."""


#: The largest dump file read: a 10,000-node cluster's pods.json is a few hundred MiB; a path
#: that is a FIFO, a device or far larger is a mistake to name, not a read that hangs or fills memory.
DUMP_FILE_MAX_BYTES = 1024 * 1024 * 1024


def _load(path: Path) -> Any:
    try:
        text = read_input_text(path, DUMP_FILE_MAX_BYTES)
    except ConfigFileError as exc:
        raise DumpError(str(exc)) from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        where = f"line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "YAML"
        raise DumpError(
            f"{path}: not valid {path.suffix.lstrip('.').upper()} ({where}: {str(exc).splitlines()[0]}); "
            "re-run kubectl cluster-info dump --all-namespaces --output-directory=DIR"
        ) from None


def _log_text(path: Path) -> str:
    """A pod's logs file: any bytes the containers wrote are kept (undecodable ones replaced)."""
    try:
        data = read_input_bytes(path, DUMP_FILE_MAX_BYTES)
    except ConfigFileError as exc:
        raise DumpError(str(exc)) from None
    return data.decode("utf-8", errors="replace")


def _items(path: Path, kind: Kind | None = None) -> list[Obj]:
    """The items of a List file; each item gets its apiVersion/kind when the List left them out.

    kubectl writes an empty list as ``"items": null`` (a nil Go slice), so null is no items."""
    data = _load(path)
    if not isinstance(data, dict) or "items" not in data or not isinstance(data["items"], list | None):
        raise DumpError(f"{path}: not a Kubernetes List (no 'items' array); expected what kubectl get -o json prints")
    out = []
    for i, item in enumerate(data["items"] or []):
        if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
            raise DumpError(f"{path}: items[{i}] is not a Kubernetes object (no metadata)")
        if kind is not None and "kind" not in item:
            item = {"apiVersion": kind.api_version, "kind": kind.kind, **item}
        out.append(item)
    return out


def _file(directory: Path, stem: str) -> Path | None:
    """The dump's file for ``stem``; anything at that path counts, so a FIFO or a directory there
    is named by the reader instead of being taken for an absent file."""
    for ext in (".json", ".yaml"):
        path = directory / f"{stem}{ext}"
        if path.exists():
            return path
    return None


def parse_logs(text: str, source: str = "logs.txt") -> dict[LogKey, str]:
    """Container logs from a ``logs.txt`` (kubectl's START/END headers); unreadable logs are left out."""
    logs: dict[LogKey, str] = {}
    key: LogKey | None = None
    lines: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        start = START.match(line)
        if start:
            if key is not None:
                raise DumpError(f"{source}: line {n}: a START header inside the log of {key[2]} (no END before it)")
            key, lines = (start.group(2), start.group(3), start.group(1)), []
            continue
        end = END.match(line)
        if end:
            if key is None:
                raise DumpError(f"{source}: line {n}: an END header with no START before it")
            body = "\n".join(lines)
            if body.strip() and not (len(lines) == 1 and lines[0].startswith(LOG_ERROR)):
                logs[key] = body
            key = None
            continue
        if key is not None:
            lines.append(line)
    if key is not None:
        raise DumpError(f"{source}: the log of container {key[2]} of pod {key[0]}/{key[1]} has no END header")
    return logs


def read_dump(directory: str | Path, namespace: str | None = None) -> Snapshot:
    """A snapshot from a dump directory (no API access). DumpError names the first bad file."""
    root = Path(directory)
    if not root.is_dir():
        raise DumpError(f"{root}: no such directory; write one with kubectl cluster-info dump --output-directory")
    nodes_file = _file(root, "nodes")
    if nodes_file is None:
        raise DumpError(
            f"{root}: no nodes.json; this is not a kubectl cluster-info dump --output-directory=DIR directory"
        )
    nodes = _items(nodes_file, NODE)
    found: dict[str, list[Obj]] = {stem: [] for stem in PER_NAMESPACE}
    configmaps: dict[str, list[Obj]] = {}
    logs: dict[LogKey, str] = {}
    previous: dict[LogKey, str] = {}
    scraped: dict[tuple[str, str], Scrape] = {}
    for ns_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for stem, kind in PER_NAMESPACE.items():
            path = _file(ns_dir, stem)
            if path is not None:
                found[stem] += _items(path, kind)
        cm = _file(ns_dir, "configmaps")
        if cm is not None:
            configmaps[ns_dir.name] = _items(cm, CONFIGMAP)
        for log_file in sorted(ns_dir.glob("*/logs.txt")):
            logs.update(parse_logs(_log_text(log_file), str(log_file)))
        for log_file in sorted(ns_dir.glob("*/previous-logs.txt")):
            previous.update(parse_logs(_log_text(log_file), str(log_file)))
        for metrics_file in sorted(ns_dir.glob(f"*/{METRICS_FILE}")):
            scraped[(ns_dir.name, metrics_file.parent.name)] = Scrape(
                _log_text(metrics_file), metrics_file.stat().st_mtime
            )
    absent: set[str] = set()
    extras: dict[str, list[Obj]] = {}
    optional: tuple[tuple[str, Kind | None], ...] = (
        ("clusterpolicies", None),
        ("nvidiadrivers", NVIDIA_DRIVER),
        ("runtimeclasses", RUNTIME_CLASS),
        ("resourceslices", RESOURCE_SLICE),
        ("poddisruptionbudgets", PDB),
    )
    for stem, item_kind in optional:
        path = _file(root, stem)
        if path is None:
            absent.add(stem)
            extras[stem] = []
        else:
            extras[stem] = _items(path, item_kind)
    pods, finished = split_finished(found["pods"], nodes)
    partial = Snapshot(
        namespace=namespace or "",
        policies=extras["clusterpolicies"],
        nodes=nodes,
        pods=pods,
        daemonsets=found["daemonsets"],
        configmaps=[],
        runtime_classes=[],
        events=[],
        drivers=extras["nvidiadrivers"],
    )
    stack_ns = detect(partial).namespace
    if stack_ns not in configmaps:
        absent.add("configmaps")  # the ConfigMaps the checks read are the stack namespace's
    return Snapshot(
        namespace=namespace or "",
        policies=extras["clusterpolicies"],
        nodes=nodes,
        pods=pods,
        daemonsets=found["daemonsets"],
        configmaps=configmaps.get(stack_ns, []),
        runtime_classes=extras["runtimeclasses"],
        events=[e for e in found["events"] if e.get("type") == "Warning"],
        logs=logs,
        previous_logs=previous,
        drivers=extras["nvidiadrivers"],
        resource_slices=extras["resourceslices"],
        pdbs=extras["poddisruptionbudgets"],
        refused=refused_in(found["pods"], stack_ns),
        finished=finished,
        absent=frozenset(absent),
        scrapes=_scrapes_by_node(pods, scraped),
    )


def _scrapes_by_node(pods: list[Obj], scraped: dict[tuple[str, str], Scrape]) -> dict[str, Scrape]:
    """The dump's exporter scrapes by the node their pod runs on (a pod the dump lacks: left out)."""
    out: dict[str, Scrape] = {}
    for pod in pods:
        scrape = scraped.get((namespace_of(pod) or "default", name_of(pod)))
        node = (pod.get("spec") or {}).get("nodeName")
        if scrape is not None and node:
            out[str(node)] = scrape
    return out


def _list_obj(kind: Kind, items: list[Obj]) -> Obj:
    return {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": {}, "items": items}


def _write(path: Path, kind: Kind, items: list[Obj]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_list_obj(kind, items), indent=4, sort_keys=True) + "\n", encoding="utf-8")


def _restarted(pod: Obj) -> set[str]:
    status = pod.get("status") or {}
    return {
        str(cs.get("name"))
        for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        if cs.get("restartCount")
    }


def _pod_logs(cluster: Cluster, pod: Obj, previous: bool = False) -> str:
    """logs.txt as kubectl writes it; ``previous``: gpuchain's previous-logs.txt, the same layout
    with the last terminated run of each container that restarted (kubectl's dump has no such file)."""
    ns, name = namespace_of(pod) or "default", name_of(pod)
    spec = pod.get("spec") or {}
    parts = []
    restarted = _restarted(pod)
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        container = str(c.get("name"))
        if previous and container not in restarted:
            continue
        parts.append(f"==== START logs for container {container} of pod {ns}/{name} ====")
        try:
            text = cluster.logs(name, namespace=ns, container=container, tail_lines=DUMP_TAIL, previous=previous)
        except KubeError as exc:
            text = f"Request log error: {exc}"
        if text:
            parts.append(text.rstrip("\n"))
        parts.append(f"==== END logs for container {container} of pod {ns}/{name} ====")
    return "\n".join(parts) + "\n"


def write_dump(cluster: Cluster, directory: str | Path, *, extras: bool = True) -> dict[str, int]:
    """Write kubectl's dump layout (plus the doctor's extras) from ``cluster``; the counts written.

    Logs are written for every pod of the GPU stack's namespace, for every pod elsewhere that is
    not ready, and for every pod whose log the live doctor reads (`snapshot.with_logs`: a ready GPU
    workload whose log says it found no GPU, a running plugin beside it), so the dump diagnoses as
    the live cluster does (kubectl writes every pod's; a GPU ticket needs these), the last
    ``DUMP_TAIL`` lines of each container; and the scrape of each ready gpuchain exporter, as the
    live doctor reads them (`snapshot.with_scrapes`), written the moment it is read.

    ``extras=False`` writes what ``kubectl cluster-info dump --all-namespaces`` itself writes and
    nothing more: every pod's current log, and none of the extras (no ClusterPolicy, NVIDIADriver,
    RuntimeClass, ResourceSlice, PodDisruptionBudget, ConfigMap, previous run or scrape). That is the
    dump most users attach to a ticket, so the doctor is measured on it too
    (tests/sim/heldout/variants.py).
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    nodes = cluster.list(NODE)
    _write(root / "nodes.json", NODE, nodes)
    per_kind = {stem: cluster.list(kind) for stem, kind in PER_NAMESPACE.items()}
    policies = list_if_served(cluster, CLUSTER_POLICY) + list_if_served(cluster, NVIDIA_CLUSTER_POLICY)
    drivers = list_if_served(cluster, NVIDIA_DRIVER)
    if extras:
        _write(root / "clusterpolicies.json", CLUSTER_POLICY, policies)
        _write(root / "nvidiadrivers.json", NVIDIA_DRIVER, drivers)
        _write(root / "runtimeclasses.json", RUNTIME_CLASS, cluster.list(RUNTIME_CLASS))
        _write(root / "resourceslices.json", RESOURCE_SLICE, list_if_served(cluster, RESOURCE_SLICE))
        pdbs = read_pdbs(cluster)
        if pdbs is not None:  # a role that may not read them leaves the file out: read back as not read, not as none
            _write(root / "poddisruptionbudgets.json", PDB, pdbs)
    namespaces = sorted({namespace_of(o) or "default" for objs in per_kind.values() for o in objs})
    partial = Snapshot(
        namespace="",
        policies=policies,
        nodes=nodes,
        pods=per_kind["pods"],
        daemonsets=per_kind["daemonsets"],
        configmaps=[],
        runtime_classes=[],
        events=[],
        drivers=drivers,
    )
    stack_ns = detect(partial).namespace
    if stack_ns and stack_ns not in namespaces:
        namespaces.append(stack_ns)
    for ns in namespaces:
        for stem, kind in PER_NAMESPACE.items():
            _write(
                root / ns / f"{stem}.json", kind, [o for o in per_kind[stem] if (namespace_of(o) or "default") == ns]
            )
    if not extras:
        for pod in per_kind["pods"]:
            path = root / (namespace_of(pod) or "default") / name_of(pod) / "logs.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_pod_logs(cluster, pod), encoding="utf-8")
        return {
            "nodes": len(nodes),
            "namespaces": len(namespaces),
            "pods": len(per_kind["pods"]),
            "podLogs": len(per_kind["pods"]),
            "scrapes": 0,
        }
    if stack_ns:
        _write(root / stack_ns / "configmaps.json", CONFIGMAP, cluster.list(CONFIGMAP, namespace=stack_ns))
    read, _ = with_logs(gather(cluster), reader=cluster_log_reader(cluster))
    read_by_doctor = {(ns, pod) for ns, pod, _ in [*read.logs, *read.previous_logs]}
    logged = 0
    for pod in per_kind["pods"]:
        ns = namespace_of(pod) or "default"
        if ns == stack_ns or not is_ready(pod) or (ns, name_of(pod)) in read_by_doctor:
            path = root / ns / name_of(pod) / "logs.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(_pod_logs(cluster, pod), encoding="utf-8")
            if _restarted(pod):
                (path.parent / "previous-logs.txt").write_text(_pod_logs(cluster, pod, True), encoding="utf-8")
            logged += 1
    scraped = 0
    scrape = cluster_scraper(cluster)
    for _, ns, name in scrape_candidates(partial)[:MAX_SCRAPES]:
        text = scrape(ns, name)
        if text is not None:
            path = root / ns / name / METRICS_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            scraped += 1
    return {
        "nodes": len(nodes),
        "namespaces": len(namespaces),
        "pods": len(per_kind["pods"]),
        "podLogs": logged,
        "scrapes": scraped,
    }
