"""Kubernetes objects for a planned cluster (pure): what ``kubectl get`` would show.

The DaemonSets and the RuntimeClass come from the operator's own ``desired()``; each operand pod
is its DaemonSet's template placed on a node, with a status that tells the node's story in the
shapes the kubelet uses (``CrashLoopBackOff`` with the last log lines in
``lastState.terminated.message``, ``Init:0/1`` as a running init container, ``ContainerCreating``
with a ``FailedCreatePodSandBox`` Event). Node status carries the kernel in ``nodeInfo`` and the
device plugin's resources in capacity/allocatable; GFD's labels are on the node.

This module places the operand and node-agent pods and puts the cluster together; the parts it
assembles each have their own module: the status and Event shapes (`sim.shapes`), the operands'
logs (`sim.operand_logs`), the Nodes (`sim.nodes`), the workload pods (`sim.workloads`) and the
ClusterPolicy with the GPU Operator's pod (`sim.clusterpolicy`).
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuchain.common.inputfile import ConfigFileError
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.desired import desired
from gpuchain.operator.operands import NODE_AGENT, OPERANDS, VALIDATOR, Facts, Operand, agent_operands
from gpuchain.operator.policy import ClusterPolicySpec
from gpuchain.sim import chain
from gpuchain.sim.chain import NodePlan
from gpuchain.sim.clusterpolicy import nvidia_policy_status, operator_pod, policy_object, without_empty
from gpuchain.sim.nodes import node_object, publish_health, runtime_version
from gpuchain.sim.operand_logs import operand_log
from gpuchain.sim.sandbox import is_vm, vm_objects
from gpuchain.sim.scenario import Scenario
from gpuchain.sim.shapes import (
    Rendered,
    completed_container,
    crashloop_container,
    init_waiting,
    no_sandbox,
    pod_status,
    running_container,
    sandbox_event,
    unique_pod_name,
    waiting_container,
    warning_event,
)
from gpuchain.sim.stacks import HOST_STACKS, namespace_for, policy_api, restyle_daemonset
from gpuchain.sim.workloads import place_workloads


def _operand_pod(ds: Obj, plan: NodePlan, operand: Operand, log: str, name: str) -> Obj:
    """The DaemonSet's pod ``name`` on this node, with the status the node's story implies."""
    spec = _placed_spec(ds, plan)
    inits = [c["name"] for c in spec.get("initContainers", [])]
    mains = [c["name"] for c in spec["containers"]]
    state = plan.state_of(operand)
    ip = "10.0.0.1"
    needs_runtime = spec.get("runtimeClassName") is not None
    if needs_runtime and plan.toolkit == chain.RUNTIME_MISSING:
        # No sandbox, so no init container runs either, whatever ready file it would wait for.
        status = no_sandbox(inits, mains=mains, ip=ip)
    elif state == chain.BLOCKED or (operand is VALIDATOR and plan.driver not in (chain.OK, chain.HOST)):
        # Init:0/N - the first init container waits for a ready file that never comes.
        status = init_waiting(0, inits=inits, mains=mains, ip=ip)
    elif operand is VALIDATOR and plan.toolkit in (chain.SOCKET_MISSING, chain.IMAGE_MISSING):
        # driver validated; toolkit-validation waits for the toolkit's ready file.
        status = init_waiting(1, inits=inits, mains=mains, ip=ip)
    elif state == chain.IMAGE_MISSING:
        # The kubelet cannot pull the image (containerd answers NotFound): ImagePullBackOff.
        pulling = waiting_container(
            mains[0], reason="ImagePullBackOff", message=f'Back-off pulling image "{spec["containers"][0]["image"]}"'
        )
        status = pod_status("Pending", inits=[completed_container(n) for n in inits], mains=[pulling], node_ip=ip)
    elif state in chain.CRASHING:
        status = pod_status(
            "Running",
            inits=[completed_container(n) for n in inits],
            mains=[crashloop_container(mains[0], log=log)],
            node_ip=ip,
        )
    elif operand is VALIDATOR and plan.plugin != chain.OK:
        # driver, toolkit and cuda validated; plugin-validation polls node capacity forever.
        status = pod_status(
            "Pending",
            inits=[*(completed_container(n) for n in inits[:-1]), running_container(inits[-1], ready=False)],
            mains=[waiting_container(n, reason="PodInitializing") for n in mains],
            node_ip=ip,
        )
    else:
        status = pod_status(
            "Running",
            inits=[completed_container(n) for n in inits],
            mains=[running_container(n) for n in mains],
            node_ip=ip,
        )
    return _pod_object(ds, name, spec, status)


def _placed_spec(ds: Obj, plan: NodePlan) -> dict[str, Any]:
    """The DaemonSet's pod spec placed on the plan's node."""
    # A shallow copy: pods share the template's containers (MemoryCluster copies what it stores).
    spec = {k: v for k, v in ds["spec"]["template"]["spec"].items() if k != "affinity"}
    spec["nodeName"] = plan.name
    return spec


def _pod_object(ds: Obj, name: str, spec: dict[str, Any], status: dict[str, Any]) -> Obj:
    """Pod ``name`` of the DaemonSet, with its spec and status."""
    labels = dict(ds["spec"]["template"]["metadata"]["labels"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ds["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name_of(ds), "uid": "", "controller": True}
            ],
        },
        "spec": spec,
        "status": status,
    }


def _agent_pod(ds: Obj, plan: NodePlan, roles: list[Operand], name: str, source: str) -> Obj:
    """The node agent's pod on this node, serving ``roles``: its init containers validate driver,
    toolkit and CUDA (``driver-validation`` waits while the node has no working driver,
    ``toolkit-validation`` while the toolkit has not configured the runtime), it cannot start
    without the NVIDIA runtime handler, and otherwise its one container runs every role.

    A role that fails alone is restarted by the agent's supervisor while the others serve
    (`gpuchain.agent.supervisor`); the simulator does not model that, and refuses a node that
    would need it rather than render it as something it is not."""
    failing = [
        op.state for op in roles if plan.state_of(op) in chain.CRASHING or plan.state_of(op) == chain.IMAGE_MISSING
    ]
    if failing:
        why = f"node {plan.name}: the node agent layout does not simulate a role failing alone ({', '.join(failing)})"
        raise ConfigFileError(source, line=None, field="policy.nodeAgent", reason=why)
    spec = _placed_spec(ds, plan)
    inits = [c["name"] for c in spec.get("initContainers", [])]
    mains = [c["name"] for c in spec["containers"]]
    ip = "10.0.0.1"
    if inits and plan.driver not in (chain.OK, chain.HOST):
        status = init_waiting(0, inits=inits, mains=mains, ip=ip)
    elif inits and plan.toolkit in (chain.SOCKET_MISSING, chain.IMAGE_MISSING):
        status = init_waiting(1, inits=inits, mains=mains, ip=ip)
    elif spec.get("runtimeClassName") and plan.toolkit == chain.RUNTIME_MISSING:
        status = no_sandbox(inits, mains=mains, ip=ip)
    else:
        status = pod_status(
            "Running",
            inits=[completed_container(n) for n in inits],
            mains=[running_container(n) for n in mains],
            node_ip=ip,
        )
    return _pod_object(ds, name, spec, status)


def _ds_status(pods: list[Obj]) -> dict[str, Any]:
    n = len(pods)
    ready = sum(any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"]) for p in pods)
    return {
        "observedGeneration": 1,
        "desiredNumberScheduled": n,
        "currentNumberScheduled": n,
        "updatedNumberScheduled": n,
        "numberReady": ready,
        "numberAvailable": ready,
        "numberUnavailable": n - ready,
        "numberMisscheduled": 0,
    }


def render(scenario: Scenario, *, plans: list[NodePlan], policy: ClusterPolicySpec) -> Rendered:
    """Every object of the simulated cluster, and the operand containers' logs."""
    out = Rendered()
    stack = scenario.stack
    ns = namespace_for(stack, scenario.namespace)
    facts = Facts(namespace=ns, policy_name=scenario.policy_name)
    # No stack installed, or its operator never ran: the GPU nodes and the workloads, nothing the operator makes.
    wanted = desired(policy, facts) if stack != "none" and not scenario.operator_pending else []
    if stack != "none":
        out.objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    others = [o for o in wanted if o["kind"] != "DaemonSet"]
    if stack in HOST_STACKS:
        others = [o for o in others if o["kind"] not in ("RuntimeClass", "ServiceAccount")]
    out.objects += others
    if policy.device_plugin.config.name and scenario.device_plugin_configs:
        out.objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": policy.device_plugin.config.name, "namespace": ns},
                "data": {k: yaml.safe_dump(v, sort_keys=False) for k, v in scenario.device_plugin_configs.items()},
            }
        )
    nodes = [node_object(p, stack) for p in plans]
    out.objects += nodes
    events: list[Obj] = []
    if scenario.operator_node_selector:
        out.objects.append(operator_pod(ns, scenario=scenario, nodes=len(nodes), events=events))
    by_operand: dict[str, list[Obj]] = {}
    by_name = {o.name: o for o in OPERANDS}
    # Every node of a scenario runs the same images (they come from the policy), so the first plan says.
    images = plans[0].images if plans else {}
    # NVIDIA's operator renders its DaemonSets from the ClusterPolicy it is given (`sim.nvidia_operands`).
    nvidia_spec = policy.model_dump(mode="json", by_alias=True) if stack == "gpu-operator" else None
    daemonsets = {
        name_of(d): restyle_daemonset(
            stack,
            state=by_name[name_of(d)].state,
            ds=d,
            image=images.get(by_name[name_of(d)].state, ""),
            nvidia_spec=nvidia_spec,
        )
        for d in wanted
        if d["kind"] == "DaemonSet" and name_of(d) != NODE_AGENT.name
    }
    agent_ds = next((d for d in wanted if d["kind"] == "DaemonSet" and name_of(d) == NODE_AGENT.name), None)
    if scenario.policy_deleted:
        # kubectl delete --cascade=orphan: the DaemonSets lose their owner and keep running.
        for d in daemonsets.values():
            d["metadata"].pop("ownerReferences", None)
    taken: set[str] = set()
    for op in OPERANDS:
        ds = daemonsets.get(op.name)
        if ds is None:
            continue
        pods = []
        for plan in plans:
            if not plan.deployed(op):
                continue
            log = operand_log(
                plan,
                operand=op,
                scenario=scenario,
                policy=policy,
                args=ds["spec"]["template"]["spec"]["containers"][0].get("args", []),
            )
            name = unique_pod_name(name_of(ds), node=plan.name, taken=taken)
            pod = _operand_pod(ds, plan, op, log, name)
            pods.append(pod)
            container = pod["spec"]["containers"][0]["name"]
            if log:
                out.logs[(ns, name_of(pod), container)] = log
            if plan.state_of(op) == chain.IMAGE_MISSING:
                ref = pod["spec"]["containers"][0]["image"]
                # containerd's answer for a tag the registry does not have, as the kubelet's Event shows it.
                events.append(
                    warning_event(
                        ns,
                        involved=pod,
                        reason="Failed",
                        message=f'Failed to pull image "{ref}": rpc error: code = NotFound desc = failed to pull and '
                        "unpack "
                        f'image "{ref}": failed to resolve reference "{ref}": {ref}: not found',
                        component="kubelet",
                        n=len(events),
                    )
                )
            if pod["spec"].get("runtimeClassName") and plan.toolkit == chain.RUNTIME_MISSING:
                events.append(sandbox_event(ns, pod=pod, n=len(events), runtime=runtime_version(plan)))
        ds = {**ds, "status": _ds_status(pods)}
        daemonsets[op.name] = ds
        by_operand[op.name] = pods
        out.objects.append(ds)
        out.objects += pods
    if agent_ds is not None:
        roles = agent_operands(policy)
        pods = []
        for plan in plans:
            if not any(plan.deployed(op) for op in roles):
                continue
            agent_pod_name = unique_pod_name(NODE_AGENT.name, node=plan.name, taken=taken)
            pod = _agent_pod(agent_ds, plan, roles, agent_pod_name, scenario.name)
            pods.append(pod)
            if pod["spec"].get("runtimeClassName") and plan.toolkit == chain.RUNTIME_MISSING:
                events.append(sandbox_event(ns, pod=pod, n=len(events), runtime=runtime_version(plan)))
        daemonsets[NODE_AGENT.name] = {**agent_ds, "status": _ds_status(pods)}
        by_operand[NODE_AGENT.name] = pods
        out.objects.append(daemonsets[NODE_AGENT.name])
        out.objects += pods
    out.objects += vm_objects({p.name: p.group for p in plans}, namespace=ns)
    workloads = place_workloads(scenario, plans=plans, out=out)
    out.objects += workloads
    node_by_name = {name_of(n): n for n in nodes}
    if stack == "gpuchain":
        # gpuchain's gpu-health publishes GPUHealthy and the faults on the Node; other stacks do not.
        for plan in plans:
            if plan.gpu and plan.plugin == chain.OK:
                publish_health(node_by_name[plan.name], plan=plan, placements=out.placements)
    if stack == "gke":
        # Google's health checker records each XID on the Node (recordXIDEvent in
        # health_check/health_checker.go); NVIDIA's plugin and gpuchain's stack write no such Event.
        for plan in plans:
            if plan.gpu and plan.lost:
                event = warning_event(
                    "default",
                    involved=node_by_name[plan.name],
                    reason="XIDError",
                    message="Caught XID error, XID=79",
                    component="nvidia-gpu-device-plugin",
                    n=len(events),
                )
                events.append(event)
    out.objects += events
    api = policy_api(stack)
    if api is not None and not scenario.policy_deleted:
        pods = [p for ps in by_operand.values() for p in ps]
        obj = {
            **policy_object(scenario, policy=policy, daemonsets=daemonsets, pods=pods, plans=plans),
            "apiVersion": api,
        }
        if api != "gpuchain.io/v1":
            obj["spec"] = without_empty(obj["spec"])
            if any(is_vm(p.group) for p in plans):
                # NVIDIA's switch for VM nodes (gpuchain's own policy model refuses it: the operands are NVIDIA's).
                obj["spec"]["sandboxWorkloads"] = {"enabled": True, "mode": "kubevirt"}
            obj["status"] = nvidia_policy_status(policy, daemonsets=daemonsets, pods=pods, plans=plans, namespace=ns)
        if scenario.operator_pending:
            del obj["status"]  # the chart created the policy; no operator ever wrote its status
        out.objects.append(obj)
    return out
