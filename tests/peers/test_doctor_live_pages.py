"""The doctor's fast live read (`LiveCluster.list_readonly`: pages, msgspec, no managedFields, node
images, pod volumes and mounts, pod IP lists nor container runtime ids) on the real kube-apiserver
gives the objects and the findings the plain `list()` read gives (issue 26).

A simulated GPU Operator cluster of 30 nodes (about 250 objects: its operand pods, GPU workloads,
DaemonSets, ConfigMaps, Events; a kernel without a driver build on 4 nodes, a GPU off the bus on 2)
is recreated on the tests/peers control plane, then read both ways with pages of 7 objects, so
that every list of more than a handful of objects takes several pages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuchain.doctor import run_doctor
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER
from gpuchain.kube import CLUSTER_POLICY, CONFIGMAP, DAEMONSET, EVENT, NODE, POD, RUNTIME_CLASS, LiveCluster
from gpuchain.kube.objects import Obj
from gpuchain.sim import build, parse_scenario
from peers.apiserver import ApiServer
from peers.test_doctor_real_dump import _lists, install_nvidia_crds
from peers.test_kube_apiserver import _until, copy_into

SCENARIO = """
name: live-pages
driverBuilds: [5.15.0-105-generic]
nodes:
  - {name: gpu, count: 24}
  - {name: newkernel, count: 4, kernel: 6.8.0-51-generic}
  - {name: lost, count: 2, lostGpus: [3]}
workloads:
  - {name: train, count: 10, gpus: 8}
  - {name: infer, count: 6, gpus: 1}
"""

#: What `gpuchain.doctor.snapshot.gather` lists, with its namespace and selectors.
READS: list[tuple[Any, str | None, str | None]] = [
    (CLUSTER_POLICY, None, None),
    (NVIDIA_CLUSTER_POLICY, None, None),
    (NODE, None, None),
    (POD, None, "status.phase!=Succeeded,status.phase!=Failed"),
    (DAEMONSET, None, None),
    (NVIDIA_DRIVER, None, None),
    (CONFIGMAP, "gpu-operator", None),
    (RUNTIME_CLASS, None, None),
    (EVENT, None, "type=Warning"),
]


class WholeObjects(LiveCluster):
    """The read the doctor made before: one request per list, lightkube's decoding, every field."""

    def list_readonly(
        self,
        kind: Any,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        return self.list(kind, namespace=namespace, label_selector=label_selector, field_selector=field_selector)


#: A Pod's metadata the API server keeps for itself, which the fast read leaves out (owners are found by kind and name).
BOOKKEEPING = ("managedFields", "uid", "resourceVersion", "generation", "creationTimestamp", "generateName")
#: A probe's handler, which the fast read leaves out (its timing stays: the doctor raises it).
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


def _left_out(obj: Obj) -> Obj:
    """``obj`` less what the fast read leaves out: managedFields, a pod's metadata bookkeeping and its owner
    references' uids, a node's images, a pod's volumes and its containers' mounts, probes' handlers and policies,
    its lists of IPs, its container statuses' runtime ids, mounts and ``started``, its conditions' timestamps and
    the defaults the server fills in."""
    out = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}
    if obj["kind"] == "Node":
        out["status"] = {k: v for k, v in obj["status"].items() if k != "images"}
    if obj["kind"] == "Pod":
        meta = {k: v for k, v in obj["metadata"].items() if k not in BOOKKEEPING}
        if meta.get("ownerReferences"):
            meta["ownerReferences"] = [{k: v for k, v in r.items() if k != "uid"} for r in meta["ownerReferences"]]
        out["metadata"] = meta
        defaults = ("volumes", "dnsPolicy", "schedulerName", "serviceAccount", "serviceAccountName")
        defaults += ("enableServiceLinks", "preemptionPolicy", "terminationGracePeriodSeconds")
        container = ("volumeMounts", "imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy")
        out["spec"] = _less(obj["spec"], defaults, ("containers", "initContainers"), container)
        for key in ("containers", "initContainers"):
            for c in out["spec"].get(key) or ():
                for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                    if c.get(probe):
                        c[probe] = {k: v for k, v in c[probe].items() if k not in HANDLERS}
        if "status" in obj:
            ids = ("containerID", "imageID", "volumeMounts", "started")
            status = ("podIPs", "hostIPs", "qosClass", "startTime")
            out["status"] = _less(obj["status"], status, ("containerStatuses", "initContainerStatuses"), ids)
            out["status"] = _less(out["status"], (), ("conditions",), ("lastProbeTime", "lastTransitionTime"))
    return out


def _less(part: Obj, keys: tuple[str, ...], lists: tuple[str, ...], item_keys: tuple[str, ...]) -> Obj:
    """``part`` without ``keys``, and each item of its ``lists`` without ``item_keys``."""
    out = {k: v for k, v in part.items() if k not in keys}
    for key in lists:
        if out.get(key):
            out[key] = [{k: v for k, v in item.items() if k not in item_keys} for item in out[key]]
    return out


def _load(apiserver: ApiServer, live: LiveCluster) -> None:
    install_nvidia_crds(live)
    copy_into(apiserver, live, build(parse_scenario(SCENARIO)).cluster)
    for kind in (CLUSTER_POLICY, NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER):
        _until(lambda kind=kind: _lists(live, kind), f"the server lists {kind.plural} of {kind.api_version}")


def test_pages_give_every_object_the_plain_list_gives_less_managed_fields(
    apiserver: ApiServer, live_cluster: LiveCluster
) -> None:
    _load(apiserver, live_cluster)
    images = [{"names": ["nvcr.io/nvidia/driver@sha256:" + "0" * 64, "nvcr.io/nvidia/driver:570"], "sizeBytes": 1}]
    live_cluster.patch_status(
        NODE, name="gpu-0", status={"images": images}
    )  # what a kubelet reports; the simulator has none
    live_cluster.list_page = 7
    for kind, namespace, fields in READS:
        whole = live_cluster.list(kind, namespace=namespace, field_selector=fields)
        live_cluster.calls.reset()
        paged = live_cluster.list_readonly(kind, namespace=namespace, field_selector=fields)
        assert paged == [_left_out(o) for o in whole], kind
        assert live_cluster.calls.by_verb["list"] == max(1, -(-len(whole) // 7)), kind  # one request per page
        if kind in (NODE, POD, DAEMONSET, CONFIGMAP):  # the server writes them on every object; gone here
            assert all("managedFields" in o["metadata"] for o in whole)
            assert not any("managedFields" in o["metadata"] for o in paged)
        if kind == POD:  # the operands' host mounts and their containers' volumeMounts; gone here
            assert any(o["spec"].get("volumes") for o in whole) and not any("volumes" in o["spec"] for o in paged)
            assert any(c.get("volumeMounts") for o in whole for c in o["spec"]["containers"])
            assert not any("volumeMounts" in c for o in paged for c in o["spec"]["containers"])
    nodes = {o["metadata"]["name"]: o for o in live_cluster.list_readonly(NODE)}
    assert (
        live_cluster.get(NODE, name="gpu-0")["status"]["images"] == images and "images" not in nodes["gpu-0"]["status"]
    )
    assert nodes["gpu-0"]["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert len(live_cluster.list_readonly(POD)) > 200


def test_the_doctor_finds_the_same_read_either_way(apiserver: ApiServer, live_cluster: LiveCluster) -> None:
    _load(apiserver, live_cluster)
    live_cluster.list_page = 7
    old = WholeObjects.from_kubeconfig(str(apiserver.kubeconfig))
    try:
        before = run_doctor(old).to_dict()
    finally:
        old.close()
    after = run_doctor(live_cluster).to_dict()
    assert {"driver.kernel-mismatch", "gpu.lost"} <= set(after["rootCauses"])
    for report in (before, after):
        del report["seconds"], report["apiCalls"]
    assert after == before


def test_the_console_command_reports_the_same_and_leaves_no_file_behind(
    apiserver: ApiServer, live_cluster: LiveCluster, tmp_path: Path
) -> None:
    """``gpuchain doctor`` from the console entry point ends without freeing its snapshot
    (`gpuchain.common.fastexit`): its report and exit status are still run_doctor's, whole, and the
    client certificate and key lightkube writes to temporary files for the kubeconfig are removed."""
    _load(apiserver, live_cluster)
    expected = run_doctor(live_cluster)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "gpuchain", "doctor", "--kubeconfig", str(apiserver.kubeconfig), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert done.returncode == expected.exit_code, done.stderr
    assert json.loads(done.stdout)["rootCauses"] == expected.to_dict()["rootCauses"]
    assert list(scratch.iterdir()) == []
