"""Operands as pure functions: ``desired(policy, facts) -> [objects]``.

Every object the operator owns is computed here from the ClusterPolicy and a few cluster facts,
with no I/O, so a test can assert on manifests and validate them against Kubernetes schemas. The
catalog and node selection are `gpuchain.operator.operands`; the pods' containers and volumes
`gpuchain.operator.podspec`.

Layout: by default (``nodeAgent.enabled``) the operands of `AGENT_ROLES` are roles of one
``gpuchain node-agent`` DaemonSet (`node_agent_daemonset`), its pod built from what their own
DaemonSets would be, merged; ``nodeAgent.enabled: false`` gives each its own DaemonSet, NVIDIA's
layout. Driver and toolkit are NVIDIA's images and always have their own.

Identity: each operand runs as its own ServiceAccount (``gpuchain-<deploy suffix>``), which the
chart binds to only what that operand does with the API; operands that do nothing with it get
no token mounted.
"""

from __future__ import annotations

from typing import Any

from gpuchain.common.quantity import add_quantities
from gpuchain.operator.drivertag import driver_image
from gpuchain.operator.operands import (
    AGENT_ROLES,
    AGENT_VALIDATIONS,
    DCGM_EXPORTER,
    DEVICE_PLUGIN,
    DRIVER,
    EXPORTER_PORT,
    EXPORTER_PORT_NAME,
    EXPORTER_SERVICE,
    GFD,
    MANAGED_BY,
    METRICS_CONFIG_PATH,
    MIG_CONFIG_FILE,
    MIG_MANAGER,
    NODE_AGENT,
    OPERANDS,
    RUNTIME_CLASS_HANDLER,
    SHARES_PLUGIN_CONFIG,
    TOOLKIT,
    USES_API,
    VALIDATOR,
    Facts,
    Operand,
    agent_operands,
    enabled,
    gpu_env,
    image_of,
    node_affinity,
    runs_mps,
    served_by,
    service_account_name,
)
from gpuchain.operator.podspec import (
    container_spec,
    init_containers,
    main_container,
    mps_shm_init,
    pod_volumes,
    validation_init,
)
from gpuchain.operator.policy import ClusterPolicySpec


def _owner(facts: Facts) -> list[dict[str, Any]]:
    if not facts.policy_uid:
        return []
    return [
        {
            "apiVersion": "gpuchain.io/v1",
            "kind": "ClusterPolicy",
            "name": facts.policy_name,
            "uid": facts.policy_uid,
            "controller": True,
        }
    ]


def _meta(name: str, facts: Facts, labels: dict[str, str] | None = None, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {**MANAGED_BY, "app.kubernetes.io/part-of": "gpuchain", **(labels or {})},
    }
    if namespaced:
        meta["namespace"] = facts.namespace
    owners = _owner(facts)
    if owners:
        meta["ownerReferences"] = owners
    return meta


def daemonset(policy: ClusterPolicySpec, *, operand: Operand, facts: Facts) -> dict[str, Any]:
    """The DaemonSet of one operand."""
    ds = policy.daemonsets
    image = image_of(policy, operand)
    pod_spec: dict[str, Any] = {
        "serviceAccountName": service_account_name(operand),
        "tolerations": [t.to_dict() for t in ds.tolerations],
        "affinity": node_affinity(operand),
        "containers": [main_container(policy, operand=operand, facts=facts)],
        "volumes": pod_volumes(operand, policy=policy, facts=facts),
    }
    if ds.priority_class_name:
        pod_spec["priorityClassName"] = ds.priority_class_name
    if image.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in image.image_pull_secrets]
    if image.host_network:
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if ds.pod_security_context:
        pod_spec["securityContext"] = ds.pod_security_context.to_dict()
    if operand is DCGM_EXPORTER and policy.dcgm_exporter.host_pid:
        pod_spec["hostPID"] = True
    if operand.state not in USES_API:
        pod_spec["automountServiceAccountToken"] = False
    if runs_mps(operand, facts):
        pod_spec["hostPID"] = True
    inits = init_containers(policy, operand=operand, facts=facts)
    if inits:
        pod_spec["initContainers"] = inits
    if operand not in (DRIVER, TOOLKIT):
        pod_spec["runtimeClassName"] = policy.operator.runtime_class
    if operand is DRIVER:
        pod_spec["hostPID"] = True
        d = policy.driver
        pod_spec["containers"][0]["image"] = driver_image(
            d.repository, image=d.image, version=d.version, tag_os=facts.driver_os
        )
    return _daemonset_object(policy, operand, pod_spec, facts, exporter=operand is DCGM_EXPORTER)


def _daemonset_object(
    policy: ClusterPolicySpec, operand: Operand, pod_spec: dict[str, Any], facts: Facts, exporter: bool
) -> dict[str, Any]:
    """The DaemonSet around a pod spec: update strategy, labels, annotations (the exporter's with
    ``exporter``)."""
    ds = policy.daemonsets
    app = {"app": operand.name}
    # The driver restarts only when the upgrade state machine deletes its pod, node by node.
    strategy: dict[str, Any] = {"type": "OnDelete"} if operand is DRIVER else {"type": ds.update_strategy}
    if strategy["type"] == "RollingUpdate":
        mu = ds.rolling_update.max_unavailable
        strategy["rollingUpdate"] = {"maxUnavailable": int(mu) if isinstance(mu, str) and mu.isdigit() else mu}
    template_meta: dict[str, Any] = {"labels": {**app, **MANAGED_BY, **ds.labels}}
    annotations = {**ds.annotations, **(policy.dcgm_exporter.annotations if exporter else {})}
    if annotations:
        template_meta["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(operand.name, facts, app),
        "spec": {
            "selector": {"matchLabels": app},
            "updateStrategy": strategy,
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }


def _merged(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries with a ``name`` (env, mounts, volumes) once each, first one kept, in order."""
    seen: dict[str, dict[str, Any]] = {}
    for item in items:
        seen.setdefault(item["name"], item)
    return list(seen.values())


def _capabilities(env: list[dict[str, Any]]) -> str:
    """The driver capabilities every role asked for, together (``compute,utility`` for MPS)."""
    asked = {c for e in env if e["name"] == "NVIDIA_DRIVER_CAPABILITIES" for c in e["value"].split(",")}
    return ",".join(sorted(asked | {"utility"}))


def agent_resources(policy: ClusterPolicySpec, roles: list[Operand]) -> dict[str, Any]:
    """The node agent's resources: each request the sum of its roles' requests, and a limit only
    for a resource every role limits (a role without a limit may take any amount), their sum.
    Quantities that do not parse are refused with the policy (``policy._node_agent_problems``)."""
    specs = [image_of(policy, op).resources for op in roles]
    given = [r for r in specs if r is not None]
    requests: dict[str, list[str | int]] = {}
    for res in given:
        for name, quantity in res.requests.items():
            requests.setdefault(name, []).append(quantity)
    limited = set.intersection(*(set(r.limits) for r in given)) if given and len(given) == len(specs) else set()
    out: dict[str, Any] = {}
    if limited:
        out["limits"] = {name: add_quantities(r.limits[name] for r in given) for name in sorted(limited)}
    if requests:
        out["requests"] = {name: add_quantities(q) for name, q in sorted(requests.items())}
    return {"resources": out} if out else {}


def _agent_container(policy: ClusterPolicySpec, roles: list[Operand], facts: Facts) -> dict[str, Any]:
    """``gpuchain node-agent --roles ...``: env and mounts the union of its roles' containers (see
    `main_container`), privileged if one of them is, the flags each role's container is given."""
    alone = [main_container(policy, operand=op, facts=facts) for op in roles]
    # CONFIG_FILE is the MIG manager's layouts alone, the node agent's the device plugin's config:
    # the agent is told the layouts by flag.
    every = [e for c in alone for e in c["env"] if e["name"] != "CONFIG_FILE"]
    gpu = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
    # Every role shares the agent's one NVML session, the validator's driver and toolkit checks too.
    env = _merged([every[0], *gpu_env(_capabilities(every)), *(e for e in every if e["name"] not in gpu)])
    if GFD in roles:  # GFD's own container is given --mig-strategy; the agent's GFD role reads the variable
        env = _merged([*env, {"name": "MIG_STRATEGY", "value": policy.mig.strategy}])
    args = ["--backend", "nvml", "--roles", ",".join(AGENT_ROLES[op] for op in roles)]
    config = policy.device_plugin.config
    if config.name and any(op in SHARES_PLUGIN_CONFIG for op in roles):
        args += ["--config-dir", "/config"]
    if DCGM_EXPORTER in roles and policy.dcgm_exporter.config.name:
        args += ["--collectors", METRICS_CONFIG_PATH]
    if MIG_MANAGER in roles and policy.mig_manager.config.name:
        args += ["--mig-config-file", MIG_CONFIG_FILE]
    extra: dict[str, Any] = {}
    if DCGM_EXPORTER in roles:  # every role's metrics are on this port, the exporter's
        extra["ports"] = [{"name": "metrics", "containerPort": EXPORTER_PORT, "protocol": "TCP"}]
    image = image_of(policy, roles[0])  # one image for all (policy._node_agent_problems)
    return container_spec(
        "node-agent",
        image=image,
        command=list(NODE_AGENT.command),
        # each role's own flags (the validator's container ran no command of its own to give them to)
        args=[*args, *(a for op in roles if op is not VALIDATOR for a in image_of(policy, op).args)],
        env=env,
        securityContext={"privileged": any(c["securityContext"]["privileged"] for c in alone)},
        volumeMounts=_merged([m for c in alone for m in c["volumeMounts"]]),
        **extra,
        **agent_resources(policy, roles),
    )


def node_agent_daemonset(policy: ClusterPolicySpec, facts: Facts) -> dict[str, Any] | None:
    """The one DaemonSet of the node agent, serving the enabled operands of `AGENT_ROLES` (None
    when it serves none): tolerations, pod settings and volumes the union of what its roles'
    own DaemonSets (`daemonset`) would have, no more."""
    roles = agent_operands(policy)
    if not roles:
        return None
    ds = policy.daemonsets
    images = [image_of(policy, op) for op in roles]
    mps = DEVICE_PLUGIN in roles and facts.mps
    pod_spec: dict[str, Any] = {
        "serviceAccountName": service_account_name(NODE_AGENT),
        "tolerations": [t.to_dict() for t in ds.tolerations],
        "affinity": node_affinity(NODE_AGENT, mig_only=roles == [MIG_MANAGER]),
        "containers": [_agent_container(policy, roles, facts)],
        "volumes": _merged([v for op in roles for v in pod_volumes(op, policy=policy, facts=facts)]),
    }
    if ds.priority_class_name:
        pod_spec["priorityClassName"] = ds.priority_class_name
    secrets = list(dict.fromkeys(s for image in images for s in image.image_pull_secrets))
    if secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in secrets]
    if any(image.host_network for image in images):
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if ds.pod_security_context:
        pod_spec["securityContext"] = ds.pod_security_context.to_dict()
    if mps or (DCGM_EXPORTER in roles and policy.dcgm_exporter.host_pid):
        pod_spec["hostPID"] = True
    if not any(op.state in USES_API for op in roles):
        pod_spec["automountServiceAccountToken"] = False
    inits = [validation_init(policy, check) for check in AGENT_VALIDATIONS] if VALIDATOR in roles else []
    if mps:
        inits.append(mps_shm_init(policy))
    if inits:
        pod_spec["initContainers"] = inits
    pod_spec["runtimeClassName"] = policy.operator.runtime_class
    return _daemonset_object(policy, NODE_AGENT, pod_spec, facts, exporter=DCGM_EXPORTER in roles)


def runtime_class(policy: ClusterPolicySpec, facts: Facts) -> dict[str, Any]:
    """RuntimeClass ``nvidia``: pods that name it get the NVIDIA container runtime handler."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": _meta(policy.operator.runtime_class, facts, namespaced=False),
        "handler": RUNTIME_CLASS_HANDLER,
    }


def service_account(operand: Operand, facts: Facts) -> dict[str, Any]:
    """The identity one operand's pods run as (the chart binds exactly what that operand needs)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(service_account_name(operand), facts, {"app": operand.name}),
    }


def exporter_service(policy: ClusterPolicySpec, facts: Facts) -> dict[str, Any]:
    """The exporter's Service as NVIDIA's operator makes it (name, port name and number, the
    ``prometheus.io/scrape`` annotation, selector on the pods' ``app`` label), so Prometheus
    scrape configs and ServiceMonitors written for NVIDIA's stack keep finding the metrics; it
    selects the pods that serve them, the node agent's where its exporter role does (same port);
    ``dcgmExporter.service.type`` and ``internalTrafficPolicy`` apply as in NVIDIA's operator."""
    app = {"app": DCGM_EXPORTER.name}  # its own label stays NVIDIA's: ServiceMonitors select the Service by it
    spec: dict[str, Any] = {
        "selector": {"app": served_by(policy).get(DCGM_EXPORTER.state, DCGM_EXPORTER.name)},
        "ports": [{"name": EXPORTER_PORT_NAME, "port": EXPORTER_PORT, "targetPort": EXPORTER_PORT, "protocol": "TCP"}],
    }
    service = policy.dcgm_exporter.service
    if service.type:
        spec["type"] = service.type
    if service.internal_traffic_policy:
        spec["internalTrafficPolicy"] = service.internal_traffic_policy
    meta = _meta(EXPORTER_SERVICE, facts, app)
    meta["annotations"] = {"prometheus.io/scrape": "true"}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def desired(policy: ClusterPolicySpec, facts: Facts) -> list[dict[str, Any]]:
    """Everything the operator should own for this policy, in roll-out order."""
    on = [op for op in OPERANDS if enabled(policy, op)]
    agent = agent_operands(policy)
    separate = [op for op in on if op not in agent]
    agent_ds = node_agent_daemonset(policy, facts)
    objs = [runtime_class(policy, facts)]
    objs += [service_account(op, facts) for op in (*separate, *([NODE_AGENT] if agent else []))]
    objs += [daemonset(policy, operand=op, facts=facts) for op in separate]
    if agent_ds is not None:
        objs.append(agent_ds)
    if DCGM_EXPORTER in on:
        objs.append(exporter_service(policy, facts))
    return objs
