"""NVIDIA's ClusterPolicy read back from the operand DaemonSets its operator rendered, for a source that lists no
ClusterPolicy (a plain ``kubectl cluster-info dump`` has none).

NVIDIA's operator renders every operand DaemonSet from the ClusterPolicy (NVIDIA/gpu-operator
controllers/object_controls.go@v26.7.0): a DaemonSet exists only for an enabled operand (its state is skipped
otherwise); TransformDriver, TransformToolkit, TransformDevicePlugin, TransformDCGMExporter,
TransformGPUDiscoveryPlugin, TransformMIGManager and TransformValidator set each main container's image to
``gpuv1.ImagePath`` of the operand's block (``<repository>/<image>:<version>``, ``@<version>`` for a digest; the
driver's tag is ``<version>-<os><os version>``, precompiled ``<branch>-<kernel>-<os><os version>``) and append the
block's ``env`` (setContainerEnv); applyMIGConfiguration writes ``MIG_STRATEGY`` from ``mig.strategy``,
transformToolkitCtrForCDI ``CDI_ENABLED`` on the toolkit from ``cdi.enabled``, transformForRuntime ``RUNTIME`` from
the runtime it detected, setRuntimeClassName the operands' ``runtimeClassName`` from ``operator.runtimeClass``, and
TransformValidatorComponent each validator component's ``env`` on its ``<component>-validation`` init container.
setContainerEnv overwrites an asset's own entry where it stands, so an entry still holding the asset's value
(`ASSET_ENV`) cannot be told from the policy's and is not read back as it. Each of these was checked against
NVIDIA's asset files as the operator renders them, at v24.9.2, v25.10.0 and v26.7.0
(tests/doctor/test_doctor_inferred_policy_assets.py).

Only what a DaemonSet shows is read back: the upgrade policy, a config map's name that no volume shows, the
manager's settings and the policy's name stay unknown (`UNREAD`).
"""

from __future__ import annotations

import re
from typing import Any

from gpuchain.doctor.stacks.base import daemonsets_in, split_image
from gpuchain.doctor.structs import Snapshot, Stack
from gpuchain.kube.objects import Obj, name_of

#: Operand state -> the ClusterPolicy key whose block renders its DaemonSet (NVIDIA/gpu-operator
#: api/nvidia/v1/clusterpolicy_types.go@v26.7.0: ClusterPolicySpec's json names).
POLICY_KEYS = {
    "driver": "driver",
    "container-toolkit": "toolkit",
    "device-plugin": "devicePlugin",
    "dcgm-exporter": "dcgmExporter",
    "gpu-feature-discovery": "gfd",
    "mig-manager": "migManager",
    "operator-validation": "validator",
}
#: Env the operator writes itself whatever the block's ``env`` says (controllers/object_controls.go@v26.7.0: the
#: ``*EnvName`` constants, the names its transforms pass to setContainerEnv (RUNTIME, CONTAINERD_RUNTIME_CLASS,
#: RUNTIME_CONFIG_SOURCE, CONFIG_FILE, DEFAULT_CONFIG, ...), the assets' NODE_NAME,
#: NVIDIA_VISIBLE_DEVICES and the validator's COMPONENT / WITH_WAIT; transformDriverContainer's KERNEL_MODULE_TYPE
#: and OPEN_KERNEL_MODULES_ENABLED, from driver.kernelModuleType (driver.useOpenKernelModules@v24.9.2) and
#: OPENSHIFT_VERSION, from the host; MPS_ROOT from devicePlugin.mps.root; transformForHostRoot's HOST_ROOT and
#: transformForDriverInstallDir's DRIVER_INSTALL_DIR* from hostPaths; the DCGM exporter's pod label switches
#: @v26.7.0): not the user's ``env``, so not read back as it.
OPERATOR_ENV = frozenset(
    {
        "RUNTIME",
        "CONTAINERD_RUNTIME_CLASS",
        "RUNTIME_CONFIG",
        "RUNTIME_SOCKET",
        "RUNTIME_DROP_IN_CONFIG",
        "RUNTIME_DROP_IN_CONFIG_HOST_PATH",
        "RUNTIME_CONFIG_SOURCE",
        "NRI_SOCKET",
        "USE_NODE_FEATURE_API",
        "DCGM_HPC_JOB_MAPPING_DIR",
        "DCGM_EXPORTER_COLLECTORS",
        "CONFIG_FILE",
        "DEFAULT_CONFIG_FILE",
        "DEFAULT_CONFIG",
        "FALLBACK_STRATEGIES",
        "NVIDIA_MIG_MONITOR_DEVICES",
        "RHCOS_VERSION",
        "RHCOS_IMAGE_MISSING",
        "CONTAINERD_CONFIG",
        "CONTAINERD_SOCKET",
        "CRIO_CONFIG_MODE",
        "CDI_ENABLED",
        "CDI_ENABLE_NRI_PLUGIN",
        "NVIDIA_RUNTIME_SET_AS_DEFAULT",
        "NVIDIA_CONTAINER_RUNTIME_MODE",
        "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES",
        "NVIDIA_CDI_HOOK_PATH",
        "CDI_ANNOTATION_PREFIX",
        "DEVICE_LIST_STRATEGY",
        "ROOT",
        "MIG_STRATEGY",
        "GDS_ENABLED",
        "MOFED_ENABLED",
        "GDRCOPY_ENABLED",
        "GPU_DIRECT_RDMA_ENABLED",
        "USE_HOST_MOFED",
        "NVIDIA_DISABLE_REQUIRE",
        "DCGM_REMOTE_HOSTENGINE_INFO",
        "DCGM_EXPORTER_CONFIGMAP_DATA",
        "VALIDATOR_IMAGE",
        "VALIDATOR_IMAGE_PULL_POLICY",
        "VALIDATOR_IMAGE_PULL_SECRETS",
        "VALIDATOR_RUNTIME_CLASS",
        "NODE_NAME",
        "KERNEL_MODULE_TYPE",
        "OPEN_KERNEL_MODULES_ENABLED",
        "OPENSHIFT_VERSION",
        "MPS_ROOT",
        "HOST_ROOT",
        "DRIVER_INSTALL_DIR",
        "DRIVER_INSTALL_DIR_CTR_PATH",
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
        "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
        "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "OPERATOR_NAMESPACE",
        "COMPONENT",
        "WITH_WAIT",
    }
)
#: The literal env NVIDIA's assets give each container themselves, with the value every release carries
#: (NVIDIA/gpu-operator assets/state-driver, state-container-toolkit, state-device-plugin, gpu-feature-discovery,
#: state-operator-validation 0500_daemonset.yaml, state-mig-manager/0600_daemonset.yaml, state-dcgm-exporter/
#: 0900_daemonset.yaml@v24.9.2 and 0800_daemonset.yaml@v25.10.0 and @v26.7.0). setContainerEnv only overwrites a
#: value where it stands, so a rendered entry with that value may be the asset's own rather than the policy's
#: ``env``: it is not read back as the user's (an entry with another value is). A variable whose default changed
#: between releases (the driver manager's ENABLE_AUTO_DRAIN, true@v24.9.2 and false@v25.10.0; plugin-validation's
#: WITH_WORKLOAD, the same) is read back with the value it has, which is the one that runs.
ASSET_ENV: dict[str, dict[str, str]] = {
    "k8s-driver-manager": {
        "ENABLE_GPU_POD_EVICTION": "true",
        "DRAIN_USE_FORCE": "false",
        "DRAIN_POD_SELECTOR_LABEL": "",
        "DRAIN_TIMEOUT_SECONDS": "0s",
        "DRAIN_DELETE_EMPTYDIR_DATA": "false",
    },
    "nvidia-container-toolkit-ctr": {
        "RUNTIME_ARGS": "",  # v24.9.2 only
        "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND": "management.nvidia.com/gpu",
        "TOOLKIT_PID_FILE": "/run/nvidia/toolkit/toolkit.pid",
    },
    "nvidia-device-plugin": {
        "PASS_DEVICE_SPECS": "true",
        "FAIL_ON_INIT_ERROR": "true",
        "DEVICE_ID_STRATEGY": "uuid",
    },
    "gpu-feature-discovery": {"GFD_SLEEP_INTERVAL": "60s", "GFD_FAIL_ON_INIT_ERROR": "true"},
    "nvidia-dcgm-exporter": {"DCGM_EXPORTER_LISTEN": ":9400", "DCGM_EXPORTER_KUBERNETES": "true"},
    "nvidia-mig-manager": {"GPU_CLIENTS_FILE": "/gpu-clients/clients.yaml"},
}
#: The toolkit env TransformToolkit set beside CDI_ENABLED while cdi.default existed (object_controls.go@v25.3.4
#: NvidiaCtrRuntimeCDIPrefixesEnvName), and no longer from v25.10.0.
CDI_PREFIXES_ENV = "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES"
#: The validator components whose ``<component>-validation`` init container carries ``validator.<component>.env``.
VALIDATOR_COMPONENTS = ("driver", "toolkit", "cuda", "plugin")
#: What no operand DaemonSet shows, so it stays unknown (`not_judged` names it).
UNREAD: tuple[tuple[str, ...], ...] = (
    ("driver", "upgradePolicy"),
    ("driver", "manager"),
    ("driver", "rdma"),
    ("driver", "repoConfig"),
    ("driver", "licensingConfig"),
    ("devicePlugin", "config"),
    ("migManager", "config"),
    ("dcgmExporter", "config"),
    ("hostPaths",),
    ("gdrcopy",),
    ("gds",),
    ("sandboxWorkloads",),
)
#: The name NVIDIA's chart gives its ClusterPolicy (deployments/gpu-operator/templates/clusterpolicy.yaml@v26.7.0:
#: ``name: cluster-policy``) and the one OpenShift's documented install creates (NVIDIA/cloud-native-docs
#: openshift/install-gpu-ocp.rst: ``gpu-cluster-policy``, in the certified operator's namespace nvidia-gpu-operator).
CHART_NAME = "cluster-policy"
OPENSHIFT_NAME = "gpu-cluster-policy"
OPENSHIFT_NAMESPACE = "nvidia-gpu-operator"
#: The DaemonSets NVIDIADriver objects render (``nvidia-gpu-driver-<os>-<hash>``).
DRIVER_CRD_PREFIX = "nvidia-gpu-driver-"
#: A driver tag's OS suffix (``-ubuntu22.04``, ``-rhcos4.14``, ``-rhel9``): what follows is no part of the version.
_OS_SUFFIX = re.compile(r"-(ubuntu|rhel|rhcos|rocky|flatcar|fedora|sles|centos|amzn|debian)[0-9.]*$")


def unread(stack: Stack, key: str) -> bool:
    """Is ``key`` (dotted, e.g. ``hostPaths``) of the stack's policy unknown because the policy was read back from
    its DaemonSets and they did not show it? A check that reads it then judges as without a policy."""
    if not stack.policy_inferred:
        return False
    node: Any = (stack.policy_obj or {}).get("spec") or {}
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return True
        node = node[part]
    return False


def unread_keys(stack: Stack) -> list[str]:
    """The `UNREAD` keys its DaemonSets did not show, dotted, for the report's not-judged line."""
    return [".".join(k) for k in UNREAD if unread(stack, ".".join(k))]


def driver_version(tag: str, precompiled: bool) -> str:
    """The ``driver.version`` a driver image tag was rendered from: the tag less its ``-<os><version>`` suffix, or a
    precompiled tag's branch (``<branch>-<kernel>-<os>``, transformPrecompiledDriverDaemonset@v26.7.0)."""
    if tag.startswith("sha256:"):
        return tag
    if precompiled:
        return tag.split("-", 1)[0]
    return _OS_SUFFIX.sub("", tag)


def _policy_image(image: str, driver: bool, precompiled: bool) -> tuple[str, str, str]:
    """The block's ``repository``, ``image`` and ``version`` an operand's image was rendered from (a driver's tag
    less what the operator appended to its version, `driver_version`)."""
    repository, name, tag = split_image(image)
    return repository, name, driver_version(tag, precompiled) if driver else tag


def _pod_spec(ds: Obj) -> dict[str, Any]:
    return ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}


def _container(ds: Obj, name: str, *, init: bool = False) -> dict[str, Any] | None:
    spec = _pod_spec(ds)
    found = [c for c in spec.get("initContainers" if init else "containers") or [] if c.get("name") == name]
    if found:
        return dict(found[0])
    return None if init else (dict((spec.get("containers") or [{}])[0]) or None)


def _env(container: dict[str, Any]) -> dict[str, str]:
    """A container's literal env (``valueFrom`` entries are the asset's, not a policy's)."""
    return {str(e["name"]): str(e.get("value", "")) for e in container.get("env") or [] if "valueFrom" not in e}


def _user_env(container: dict[str, Any]) -> list[dict[str, str]]:
    """The entries of a container's env the policy's ``env`` set: neither the operator's own (`OPERATOR_ENV`) nor
    the asset's default (`ASSET_ENV`)."""
    asset = ASSET_ENV.get(str(container.get("name") or ""), {})
    return [{"name": k, "value": v} for k, v in _env(container).items() if k not in OPERATOR_ENV and asset.get(k) != v]


def policy_name(snapshot: Snapshot, namespace: str) -> str:
    """The name the ClusterPolicy most likely has: OpenShift's documented one where the operator runs as OpenShift's
    certified operator (its namespace, or RHCOS nodes), the chart's otherwise."""
    rhcos = any(
        "CoreOS" in str(((n.get("status") or {}).get("nodeInfo") or {}).get("osImage") or "") for n in snapshot.nodes
    )
    return OPENSHIFT_NAME if namespace == OPENSHIFT_NAMESPACE or rhcos else CHART_NAME


def infer_policy(
    snapshot: Snapshot, namespace: str, daemonsets: dict[str, str], containers: dict[str, str], prefixes: dict[str, str]
) -> tuple[Obj, tuple[str, ...]] | None:
    """The ClusterPolicy NVIDIA's operator rendered the operand DaemonSets of ``namespace`` from, with a line per
    field saying where it was read; None where no operand DaemonSet is there to read (an operator that never
    reconciled renders none, and then nothing of its policy shows)."""
    present = daemonsets_in(snapshot, namespace)
    by_state: dict[str, list[Obj]] = {}
    for ds_name, ds in present.items():
        state = next((s for s, n in daemonsets.items() if n == ds_name), None)
        state = state or next((s for p, s in prefixes.items() if ds_name.startswith(p)), None)
        if state in POLICY_KEYS:
            by_state.setdefault(state, []).append(ds)
    if not by_state:
        return None
    spec: dict[str, Any] = {}
    read: list[str] = []
    for state, key in POLICY_KEYS.items():
        found = by_state.get(state) or []
        block: dict[str, Any] = {"enabled": bool(found)}
        spec[key] = block
        if not found:
            read.append(f"{key}.enabled=false (no {daemonsets[state]} DaemonSet)")
            continue
        names = ", ".join(sorted(name_of(d) for d in found))
        read.append(f"{key}.enabled=true ({names})")
        if state == "driver" and any(name_of(d).startswith(DRIVER_CRD_PREFIX) for d in found):
            # NVIDIADriver objects render these, not the policy (NVIDIA/gpu-operator
            # controllers/nvidiadriver_controller.go@v26.7.0): only the switch that hands them the driver shows.
            block["useNvidiaDriverCRD"] = True
            read.append(f"driver.useNvidiaDriverCRD=true ({names})")
            continue
        mains = [c for d in found if (c := _container(d, containers.get(state, ""))) is not None]
        images = sorted({str(c.get("image") or "") for c in mains})
        precompiled = state == "driver" and any(name_of(d).startswith(daemonsets[state] + "-") for d in found)
        # Precompiled drivers run one DaemonSet per kernel, each image tagged <branch>-<kernel>-<os>
        # (transformPrecompiledDriverDaemonset, resolveDriverTag in controllers/object_controls.go@v25.10.0): they
        # agree on all but the kernel, so the policy's fields are read where every image gives the same ones.
        parts = {_policy_image(image, state == "driver", precompiled) for image in images}
        if len(parts) == 1 and all(images):
            repository, name, version = parts.pop()
            block.update({k: v for k, v in (("repository", repository), ("image", name), ("version", version)) if v})
            if precompiled:
                block["usePrecompiled"] = True
            read.append(f"{key} image {', '.join(images)}: version {version}")
        if state == "driver":
            _kernel_modules(block, mains, read)
        if state == "driver" and len(found) == 1:
            _driver_parts(spec, block, found[0], read)
        if len(mains) == 1 and (env := _user_env(mains[0])):
            block["env"] = env
            read.append(f"{key}.env {', '.join(e['name'] for e in env)} ({containers.get(state, '')})")
    _cluster_switches(spec, by_state, containers, read)
    obj: Obj = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": policy_name(snapshot, namespace)},
        "spec": spec,
    }
    return obj, tuple(read)


#: The driver DaemonSet's sidecars and the switch that keeps each: the asset carries them all and the operator
#: removes the ones whose feature the policy leaves off (assets/state-driver/0500_daemonset.yaml@v26.7.0;
#: transformPeerMemoryContainer, transformGDSContainer, transformGDRCopyContainer in object_controls.go@v26.7.0).
DRIVER_SIDECARS = {
    "nvidia-peermem-ctr": ("driver", "rdma"),
    "nvidia-fs-ctr": ("gds", ""),
    "nvidia-gdrcopy-ctr": ("gdrcopy", ""),
}
#: The driver manager init container (transformDriverManagerInitContainer@v26.7.0: the image of driver.manager, its
#: env, GPU_DIRECT_RDMA_ENABLED and USE_HOST_MOFED from driver.rdma).
DRIVER_MANAGER = "k8s-driver-manager"
#: The validator's volume that transformForDriverInstallDir@v26.7.0 points at hostPaths.driverInstallDir.
INSTALL_DIR_VOLUME = "driver-install-dir"


def _kernel_modules(block: dict[str, Any], mains: list[dict[str, Any]], read: list[str]) -> None:
    """driver.kernelModuleType from the driver containers' KERNEL_MODULE_TYPE, where they agree; before it existed,
    driver.useOpenKernelModules from OPEN_KERNEL_MODULES_ENABLED=true alone (transformDriverContainer,
    controllers/object_controls.go@v25.10.0 and @v26.7.0 write both, the second only for open; @v24.9.2 the second
    only, from useOpenKernelModules)."""
    envs = [_env(c) for c in mains]
    kinds = {env.get("KERNEL_MODULE_TYPE", "") for env in envs}
    kind = next(iter(kinds)) if len(kinds) == 1 else ""
    if kind:
        block["kernelModuleType"] = kind
        read.append(f"driver.kernelModuleType={kind} (KERNEL_MODULE_TYPE of the driver container)")
    elif kinds == {""} and all(env.get("OPEN_KERNEL_MODULES_ENABLED") == "true" for env in envs):
        block["useOpenKernelModules"] = True
        read.append("driver.useOpenKernelModules=true (OPEN_KERNEL_MODULES_ENABLED of the driver container)")


def _driver_parts(spec: dict[str, Any], block: dict[str, Any], ds: Obj, read: list[str]) -> None:
    """The driver block's parts the driver DaemonSet shows beside its image: the sidecars of GPUDirect RDMA, GDS and
    GDRCopy, and the driver manager's image and env."""
    names = {str(c.get("name")) for c in _pod_spec(ds).get("containers") or []}
    manager = _container(ds, DRIVER_MANAGER, init=True)
    if manager is None:
        return  # not NVIDIA's asset, which always has the manager: no sidecar was ever there to remove
    for sidecar, (key, sub) in DRIVER_SIDECARS.items():
        on = sidecar in names
        target = block.setdefault(sub, {}) if sub else spec.setdefault(key, {})
        target["enabled"] = on
        read.append(
            f"{key}{'.' + sub if sub else ''}.enabled={str(on).lower()} ({sidecar} {'in' if on else 'not in'} "
            f"{name_of(ds)})"
        )
    repository, image, version = split_image(str(manager.get("image") or ""))
    env = _env(manager)
    block["manager"] = {k: v for k, v in (("repository", repository), ("image", image), ("version", version)) if v}
    rest = _user_env(manager)
    if rest:
        block["manager"]["env"] = rest
    block.setdefault("rdma", {})["useHostMofed"] = env.get("USE_HOST_MOFED") == "true"
    read.append(f"driver.manager image {manager.get('image')}, driver.rdma.useHostMofed from {DRIVER_MANAGER}'s env")


def _cluster_switches(
    spec: dict[str, Any], by_state: dict[str, list[Obj]], containers: dict[str, str], read: list[str]
) -> None:
    """The switches one operand's DaemonSet shows for the whole policy: mig.strategy (MIG_STRATEGY of the device
    plugin, else GFD), cdi.enabled (the toolkit's CDI_ENABLED), operator.runtimeClass and operator.defaultRuntime
    (the plugin's runtimeClassName, the toolkit's RUNTIME), validator.<component>.env."""

    def main(state: str) -> dict[str, Any] | None:
        found = by_state.get(state) or []
        return _container(found[0], containers.get(state, "")) if len(found) == 1 else None

    for state in ("device-plugin", "gpu-feature-discovery"):
        strategy = _env(main(state) or {}).get("MIG_STRATEGY")
        if strategy in ("none", "single", "mixed"):
            spec["mig"] = {"strategy": strategy}
            read.append(f"mig.strategy={strategy} (MIG_STRATEGY of {containers.get(state, state)})")
            break
    toolkit = main("container-toolkit")
    if toolkit is not None:
        env = _env(toolkit)
        cdi = env.get("CDI_ENABLED", "false") == "true"
        spec["cdi"] = {"enabled": cdi}
        read.append(f"cdi.enabled={str(cdi).lower()} (CDI_ENABLED of {containers.get('container-toolkit')})")
        # TransformToolkit sets the runtime's mode to cdi only where cdi.default is set as well, beside the
        # annotation prefixes (controllers/object_controls.go@v24.9.2 and @v25.3.4, config.CDI.IsDefault()); from
        # v25.10.0 cdi.default is gone and transformToolkitCtrForCDI sets the mode cdi for every CDI policy, with
        # NVIDIA_RUNTIME_SET_AS_DEFAULT and no prefixes (object_controls.go@v25.10.0, @v26.7.0): there the mode
        # says nothing of a cdi.default.
        if cdi and env.get("NVIDIA_CONTAINER_RUNTIME_MODE") == "cdi" and CDI_PREFIXES_ENV in env:
            spec["cdi"]["default"] = True
            mode_of = containers.get("container-toolkit")
            read.append(f"cdi.default=true (NVIDIA_CONTAINER_RUNTIME_MODE=cdi of {mode_of})")
        if env.get("RUNTIME") in ("containerd", "docker", "crio"):
            spec.setdefault("operator", {})["defaultRuntime"] = env["RUNTIME"]
            read.append(f"operator.defaultRuntime={env['RUNTIME']} (RUNTIME of {containers.get('container-toolkit')})")
    plugin = by_state.get("device-plugin") or []
    runtime_class = _pod_spec(plugin[0]).get("runtimeClassName") if len(plugin) == 1 else None
    if runtime_class:
        spec.setdefault("operator", {})["runtimeClass"] = str(runtime_class)
        read.append(f"operator.runtimeClass={runtime_class} (runtimeClassName of the device plugin DaemonSet)")
    # applyCommonDaemonsetConfig (object_controls.go@v26.7.0) gives every operand daemonsets.tolerations where set
    # (the chart's default is the nvidia.com/gpu toleration the assets carry): one operand's show them.
    first = next((found[0] for found in by_state.values() if len(found) == 1), None)
    tolerations = _pod_spec(first).get("tolerations") if first is not None else None
    if tolerations:
        spec["daemonsets"] = {"tolerations": list(tolerations)}
        read.append(f"daemonsets.tolerations ({len(tolerations)}, of {name_of(first or {})})")
    validators = by_state.get("operator-validation") or []
    volumes = _pod_spec(validators[0]).get("volumes") or [] if len(validators) == 1 else []
    install_dir = next(
        (str((v.get("hostPath") or {}).get("path") or "") for v in volumes if v.get("name") == INSTALL_DIR_VOLUME), ""
    )
    if install_dir:
        spec["hostPaths"] = {"driverInstallDir": install_dir}
        read.append(f"hostPaths.driverInstallDir={install_dir} (volume {INSTALL_DIR_VOLUME} of the validator)")
    if len(validators) == 1:
        for component in VALIDATOR_COMPONENTS:
            init = _container(validators[0], f"{component}-validation", init=True)
            env_list = _user_env(init) if init is not None else []
            if env_list:
                spec["validator"].setdefault(component, {})["env"] = env_list
                names = ", ".join(e["name"] for e in env_list)
                read.append(f"validator.{component}.env {names} ({component}-validation init container)")
