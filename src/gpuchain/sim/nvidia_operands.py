"""What NVIDIA's GPU Operator renders into its operand DaemonSets from the ClusterPolicy, on top of the pod specs the
simulator borrows from gpuchain's own operator (`gpuchain.sim.stacks.restyle_daemonset`).

A user's ``kubectl cluster-info dump`` has no ClusterPolicy, so the doctor reads the policy back from these
DaemonSets (`gpuchain.doctor.stacks.inferred_policy`); the simulated GPU Operator's DaemonSets must therefore show
what NVIDIA's show (NVIDIA/gpu-operator controllers/object_controls.go@v25.3.4 and assets/state-*/0500_daemonset.yaml
@v25.3.4):

- TransformDriver: the asset's ``k8s-driver-manager`` init container, its image ``driver.manager``'s
  (transformDriverManagerInitContainer, with ``GPU_DIRECT_RDMA_ENABLED`` / ``USE_HOST_MOFED`` from ``driver.rdma``
  and ``driver.manager.env``), and the sidecars the asset carries kept only for an enabled feature
  (transformPeerMemoryContainer: ``driver.rdma``, transformGDSContainer: ``gds``, transformGDRCopyContainer:
  ``gdrcopy``), each running its block's image;
- TransformToolkit: ``CDI_ENABLED`` and its companions where ``cdi.enabled``, ``NVIDIA_CONTAINER_RUNTIME_MODE=cdi``
  where ``cdi.default``, then ``toolkit.env``;
- TransformDevicePlugin: ``devicePlugin.env`` (MIG_STRATEGY, from ``mig.strategy``, the borrowed spec has);
- the validator asset's ``driver-install-dir`` hostPath volume, pointed at ``hostPaths.driverInstallDir``
  (transformForDriverInstallDir).

The toolkit's ``NVIDIA_RUNTIME_SET_AS_DEFAULT`` is gpuchain's own operator's choice, which NVIDIA's asset does not set:
it is dropped. The driver manager's drain settings (the asset's ``ENABLE_AUTO_DRAIN`` etc., which the operator fills
from ``driver.upgradePolicy``) are not rendered: no policy key the simulator models sets them.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuchain.kube.objects import Obj

#: The driver manager image NVIDIA's chart names (deployments/gpu-operator/values.yaml@v25.3.4 ``driver.manager``).
DRIVER_MANAGER_IMAGE = ("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.8.1")
#: Sidecar container of the driver DaemonSet -> (policy key whose ``enabled`` keeps it, the image its block defaults
#: to: values.yaml@v25.3.4 ``gds``, ``gdrcopy``; peermem runs the driver's own image).
DRIVER_SIDECARS: dict[str, tuple[tuple[str, ...], tuple[str, str, str] | None]] = {
    "nvidia-peermem-ctr": (("driver", "rdma"), None),
    "nvidia-fs-ctr": (("gds",), ("nvcr.io/nvidia/cloud-native", "nvidia-fs", "2.20.5")),
    "nvidia-gdrcopy-ctr": (("gdrcopy",), ("nvcr.io/nvidia/cloud-native", "gdrdrv", "v2.5.1")),
}
#: What TransformToolkit sets where ``cdi.enabled`` (object_controls.go@v25.3.4: CDIEnabledEnvName,
#: NvidiaCtrRuntimeCDIPrefixesEnvName, CrioConfigModeEnvName).
TOOLKIT_CDI_ENV = (
    ("CDI_ENABLED", "true"),
    ("NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES", "nvidia.cdi.k8s.io/"),
    ("CRIO_CONFIG_MODE", "config"),
)
#: The validator asset's volume for the driver's root and its default path (DefaultDriverInstallDir).
INSTALL_DIR_VOLUME = "driver-install-dir"
DEFAULT_INSTALL_DIR = "/run/nvidia/driver"
#: Env of gpuchain's own toolkit container that NVIDIA's asset and transforms never set.
GPUCHAIN_ONLY_TOOLKIT_ENV = frozenset({"NVIDIA_RUNTIME_SET_AS_DEFAULT"})


def _block(spec: dict[str, Any], *path: str) -> dict[str, Any]:
    node: Any = spec
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _image(block: dict[str, Any], default: tuple[str, str, str]) -> str:
    """``gpuv1.ImagePath`` of a block (api/nvidia/v1/clusterpolicy_types.go@v25.3.4): ``repository/image:version``,
    ``@version`` for a digest; a part the block leaves out is the chart's."""
    keys = ("repository", "image", "version")
    repository, image, version = (str(block.get(k) or d) for k, d in zip(keys, default, strict=True))
    return f"{repository}/{image}{'@' if version.startswith('sha256:') else ':'}{version}"


def set_env(container: dict[str, Any], name: str, value: str) -> None:
    """setContainerEnv (object_controls.go@v25.3.4): replace the variable's value, or append it."""
    env = container.setdefault("env", [])
    for entry in env:
        if entry.get("name") == name:
            entry.pop("valueFrom", None)
            entry["value"] = value
            return
    env.append({"name": name, "value": value})


def _user_env(container: dict[str, Any], entries: Any) -> None:
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name"):
            set_env(container, str(entry["name"]), str(entry.get("value") or ""))


def _driver(pod: dict[str, Any], spec: dict[str, Any]) -> None:
    driver = _block(spec, "driver")
    rdma = _block(driver, "rdma")
    manager = _block(driver, "manager")
    init: dict[str, Any] = {
        "name": "k8s-driver-manager",
        "image": _image(manager, DRIVER_MANAGER_IMAGE),
        "command": ["driver-manager"],
        "args": ["uninstall_driver"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
            {"name": "OPERATOR_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "securityContext": {"privileged": True},
    }
    if rdma.get("enabled"):
        set_env(init, "GPU_DIRECT_RDMA_ENABLED", "true")
        if rdma.get("useHostMofed"):
            set_env(init, "USE_HOST_MOFED", "true")
    _user_env(init, manager.get("env"))
    pod["initContainers"] = [init, *(c for c in pod.get("initContainers") or [] if c.get("name") != init["name"])]
    main = pod["containers"][0]
    for name, (path, default) in DRIVER_SIDECARS.items():
        block = _block(spec, *path)
        if not block.get("enabled") or any(c.get("name") == name for c in pod["containers"]):
            continue
        image = _image(block, default) if default else str(main.get("image") or "")
        pod["containers"].append({"name": name, "image": image, "securityContext": {"privileged": True}})


def _toolkit(pod: dict[str, Any], spec: dict[str, Any]) -> None:
    main = pod["containers"][0]
    main["env"] = [e for e in main.get("env") or [] if e.get("name") not in GPUCHAIN_ONLY_TOOLKIT_ENV]
    cdi = _block(spec, "cdi")
    if cdi.get("enabled"):
        for name, value in TOOLKIT_CDI_ENV:
            set_env(main, name, value)
        if cdi.get("default"):
            set_env(main, "NVIDIA_CONTAINER_RUNTIME_MODE", "cdi")
    _user_env(main, _block(spec, "toolkit").get("env"))


def _device_plugin(pod: dict[str, Any], spec: dict[str, Any]) -> None:
    _user_env(pod["containers"][0], _block(spec, "devicePlugin").get("env"))


def _validator(pod: dict[str, Any], spec: dict[str, Any]) -> None:
    path = str(_block(spec, "hostPaths").get("driverInstallDir") or DEFAULT_INSTALL_DIR)
    volumes = [v for v in pod.get("volumes") or [] if v.get("name") != INSTALL_DIR_VOLUME]
    pod["volumes"] = [*volumes, {"name": INSTALL_DIR_VOLUME, "hostPath": {"path": path}}]


TRANSFORMS = {
    "driver": _driver,
    "container-toolkit": _toolkit,
    "device-plugin": _device_plugin,
    "operator-validation": _validator,
}


def nvidia_rendered(ds: Obj, *, state: str, spec: dict[str, Any]) -> Obj:
    """The operand DaemonSet ``ds`` with what NVIDIA's operator renders into it from the ClusterPolicy ``spec``
    (its ``nvidia.com/v1`` json names); a state NVIDIA renders nothing more into is returned as given."""
    transform = TRANSFORMS.get(state)
    if transform is None:
        return ds
    ds = copy.deepcopy(ds)
    transform(ds["spec"]["template"]["spec"], spec)
    return ds
