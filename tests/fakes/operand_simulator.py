"""A DaemonSet controller and kubelet stand-in for operands, so the roll-out can be watched in memory.

It plays what the cluster does with the operator's DaemonSets: one pod per selected node
(node affinity and nodeSelector evaluated like the scheduler), pods recreated on template change
unless the strategy is OnDelete, and on each node the validator's ready files appearing link by
link as gpuchain orders them: an init container ``gpuchain validate wait <link>`` waits for
``<link>-ready``; the validator's ``gpuchain validate <link>`` writes it when the link's pod runs.
Faults: a set of operand names that crash-loop on a node; drivers pre-installed on the host.
A test double, so it lives with the tests: the operator tests and the operator benchmark use it
(the scenario simulator renders operand pods itself, `gpuchain.sim.render`); nothing in gpuchain does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuchain.kube import DAEMONSET, NODE, POD, Cluster, labels_of, name_of
from gpuchain.kube.selectors import match_label_selector_object
from gpuchain.operator.operands import DEVICE_PLUGIN, DRIVER, TOOLKIT


def schedules_on(pod_spec: Mapping[str, Any], node_labels: Mapping[str, str]) -> bool:
    """Do a pod template's nodeSelector and required node affinity admit a node with these labels?"""
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if node_labels.get(k) != v:
            return False
    required = (
        (pod_spec.get("affinity") or {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if not required:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(
        match_label_selector_object({"matchExpressions": t.get("matchExpressions") or []}, node_labels) for t in terms
    )


@dataclass
class OperandSimulator:
    """Drive operand pods and DaemonSet status on a `Cluster` (usually a MemoryCluster)."""

    cluster: Cluster
    namespace: str = "gpu-operator"
    crashloop: dict[str, set[str]] = field(default_factory=dict)  #: node -> operand DaemonSet names
    preinstalled: bool = False  #: host has driver and toolkit without their operands
    files: dict[str, set[str]] = field(default_factory=dict)  #: node -> ready files (without -ready)

    def settle(self, rounds: int = 10) -> int:
        """Step until nothing changes (or ``rounds``); returns the rounds that wrote something."""
        busy = 0
        for _ in range(rounds):
            if not self.step():
                break
            busy += 1
        return busy

    def step(self) -> bool:
        """One pass of controller + kubelets; True if it wrote anything."""
        wrote = False
        dss = {name_of(d): d for d in self.cluster.list(DAEMONSET, namespace=self.namespace)}
        nodes = {name_of(n): labels_of(n) for n in self.cluster.list(NODE)}
        pods = {name_of(p): p for p in self.cluster.list(POD, namespace=self.namespace)}
        wanted: dict[str, tuple[str, str]] = {}
        for ds_name, ds in sorted(dss.items()):
            spec = ds["spec"]["template"]["spec"]
            for node, labels in nodes.items():
                if schedules_on(spec, labels):
                    wanted[f"{ds_name}-{node}"] = (ds_name, node)
        for pod_name, pod in list(pods.items()):
            owner = pod["metadata"].get("labels", {}).get("app")
            stale = pod_name not in wanted
            if not stale and owner in dss:
                ds = dss[str(owner)]
                outdated = (
                    pod["spec"]["containers"][0]["image"] != ds["spec"]["template"]["spec"]["containers"][0]["image"]
                )
                stale = outdated and ds["spec"].get("updateStrategy", {}).get("type") != "OnDelete"
            if stale:
                self.cluster.delete(POD, name=pod_name, namespace=self.namespace)
                del pods[pod_name]
                wrote = True
        for pod_name, (ds_name, node) in wanted.items():
            if pod_name not in pods:
                pods[pod_name] = self.cluster.create(self._pod(dss[ds_name], pod_name, node))
                wrote = True
        final: dict[str, dict[str, Any]] = {}
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in pods.values():
            by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
        for node, node_pods in by_node.items():
            statuses = self._node(node, node_pods, set(dss))
            for pod in node_pods:
                new = statuses[name_of(pod)]
                final[name_of(pod)] = {**pod, "status": new}
                if pod.get("status") != new:
                    self.cluster.patch_status(POD, name=name_of(pod), status=new, namespace=self.namespace)
                    wrote = True
        for ds_name, ds in dss.items():
            mine = [final[n] for n, (d, _) in wanted.items() if d == ds_name]
            wrote |= self._ds_status(ds, mine)
        return wrote

    def _pod(self, ds: dict[str, Any], name: str, node: str) -> dict[str, Any]:
        template = copy.deepcopy(ds["spec"]["template"])
        spec = template["spec"]
        spec["nodeName"] = node
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": template.get("metadata", {}).get("labels", {}),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": name_of(ds),
                        "uid": ds["metadata"].get("uid", ""),
                    }
                ],
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        }

    def _node(self, node: str, pods: list[dict[str, Any]], deployed: set[str]) -> dict[str, dict[str, Any]]:
        """Fixpoint of init containers and ready files on one node; pod name -> status."""
        files: set[str] = set()
        running: set[str] = set()
        progress: dict[str, int] = {}
        crashing = self.crashloop.get(node, set())
        for _ in range(len(pods) * 5 + 5):
            before = (len(files), len(running))
            for pod in pods:
                app = pod["metadata"]["labels"].get("app", "")
                inits = pod["spec"].get("initContainers") or []
                done = 0
                for init in inits:
                    cmd = init.get("command") or []
                    if cmd[:3] == ["gpuchain", "validate", "wait"]:
                        ok = cmd[3] in files
                    elif cmd[:2] == ["gpuchain", "validate"]:
                        ok = self._check(cmd[2], running, files, deployed)
                        if ok:
                            files.add(cmd[2])
                    else:
                        ok = True
                    if not ok:
                        break
                    done += 1
                progress[name_of(pod)] = done
                if done == len(inits) and app not in crashing:
                    running.add(app)
            if (len(files), len(running)) == before:
                break
        self.files[node] = files
        return {
            name_of(p): _status(p, progress[name_of(p)], p["metadata"]["labels"].get("app") in crashing) for p in pods
        }

    def _check(self, link: str, running: set[str], files: set[str], deployed: set[str]) -> bool:
        if link == "driver":
            return DRIVER.name in running or (DRIVER.name not in deployed and self.preinstalled)
        if link == "toolkit":
            return "driver" in files and (
                TOOLKIT.name in running or (TOOLKIT.name not in deployed and self.preinstalled)
            )
        if link == "cuda":
            return "toolkit" in files
        if link == "plugin":
            return "cuda" in files and DEVICE_PLUGIN.name in running
        return False

    def _ds_status(self, ds: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        """DaemonSet status as its controller reports it, from the pods' statuses this step."""
        image = _image(ds["spec"]["template"]["spec"])
        ready = sum(1 for p in pods if (p.get("status") or {}).get("conditions", [{}])[0].get("status") == "True")
        status = {
            "desiredNumberScheduled": len(pods),
            "currentNumberScheduled": len(pods),
            "numberReady": ready,
            "numberAvailable": ready,
            "numberUnavailable": len(pods) - ready,
            "numberMisscheduled": 0,
            "updatedNumberScheduled": sum(1 for p in pods if _image(p["spec"]) == image),
            "observedGeneration": int(ds["metadata"].get("generation") or 1),
        }
        if all(ds.get("status", {}).get(k) == v for k, v in status.items()):
            return False
        self.cluster.patch_status(DAEMONSET, name=name_of(ds), status=status, namespace=self.namespace)
        return True


def _image(pod_spec: Mapping[str, Any]) -> str:
    return str(pod_spec["containers"][0]["image"])


def _status(pod: dict[str, Any], inits_done: int, crashing: bool) -> dict[str, Any]:
    inits = pod["spec"].get("initContainers") or []
    init_statuses = []
    for i, c in enumerate(inits):
        if i < inits_done:
            state: dict[str, Any] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
        elif i == inits_done:
            state = {"running": {}}
        else:
            state = {"waiting": {"reason": "PodInitializing"}}
        init_statuses.append({"name": c["name"], "ready": i < inits_done, "state": state})
    initialized = inits_done >= len(inits)
    containers = []
    for c in pod["spec"]["containers"]:
        if not initialized:
            cstate: dict[str, Any] = {"waiting": {"reason": "PodInitializing"}}
        elif crashing:
            cstate = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}}
        else:
            cstate = {"running": {}}
        containers.append(
            {"name": c["name"], "image": c["image"], "ready": initialized and not crashing, "state": cstate}
        )
    ready = initialized and not crashing
    status: dict[str, Any] = {
        "phase": "Running" if initialized else "Pending",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": containers,
    }
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    return status
