"""`infer_policy` against NVIDIA's own operand DaemonSet assets, filled as NVIDIA's operator fills them.

The other tests of `gpuchain.doctor.stacks.inferred_policy` feed DaemonSets shaped by hand (or by the simulator)
after the operator's Go code; these feed the asset files themselves (tests/doctor/fixtures/gpu-operator-assets/
<tag>/, copied verbatim from NVIDIA/gpu-operator ``assets/`` at each tag), so a release whose layout differs from
what the reader expects (a container or env name, an env default, a sidecar) fails here.

`_fill` is the smallest part of the operator's transforms (NVIDIA/gpu-operator controllers/object_controls.go at
the same tag) that writes the fields `infer_policy` reads: each main container's image, the blocks' ``env``, the
driver DaemonSet's name and sidecars, the CDI env, MIG_STRATEGY, the runtime class, the validator's components.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuchain.doctor.stacks.gpu_operator import CONTAINERS, DAEMONSETS, DRIVER_PREFIX, PRECOMPILED_PREFIX
from gpuchain.doctor.stacks.inferred_policy import OPERATOR_ENV, POLICY_KEYS, infer_policy
from gpuchain.doctor.structs import Snapshot
from gpuchain.kube.objects import Obj

FIXTURES = Path(__file__).parent / "fixtures"
ASSETS = FIXTURES / "gpu-operator-assets"
TAGS = ("v24.9.2", "v25.10.0", "v26.7.0")
NAMESPACE = "gpu-operator"
#: The asset folder of each operand state (NVIDIA/gpu-operator assets/ at each tag).
STATE_DIRS = {
    "driver": "state-driver",
    "container-toolkit": "state-container-toolkit",
    "device-plugin": "state-device-plugin",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "dcgm-exporter": "state-dcgm-exporter",
    "mig-manager": "state-mig-manager",
    "operator-validation": "state-operator-validation",
}
#: The images the chart names at each tag (NVIDIA/gpu-operator deployments/gpu-operator/values.yaml@<tag>; the
#: validator's version is the chart's appVersion).
CHART_IMAGES: dict[str, dict[str, tuple[str, str, str]]] = {
    "v24.9.2": {
        "driver": ("nvcr.io/nvidia", "driver", "550.144.03"),
        "toolkit": ("nvcr.io/nvidia/k8s", "container-toolkit", "v1.17.4-ubuntu20.04"),
        "devicePlugin": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.17.0"),
        "dcgmExporter": ("nvcr.io/nvidia/k8s", "dcgm-exporter", "3.3.9-3.6.1-ubuntu22.04"),
        "gfd": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.17.0"),
        "migManager": ("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.10.0-ubuntu20.04"),
        "validator": ("nvcr.io/nvidia/cloud-native", "gpu-operator-validator", "v24.9.2"),
        "manager": ("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.7.0"),
    },
    "v25.10.0": {
        "driver": ("nvcr.io/nvidia", "driver", "580.95.05"),
        "toolkit": ("nvcr.io/nvidia/k8s", "container-toolkit", "v1.18.0"),
        "devicePlugin": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.18.0"),
        "dcgmExporter": ("nvcr.io/nvidia/k8s", "dcgm-exporter", "4.4.1-4.6.0-distroless"),
        "gfd": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.18.0"),
        "migManager": ("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.13.0"),
        "validator": ("nvcr.io/nvidia", "gpu-operator", "v25.10.0"),
        "manager": ("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.9.0"),
    },
    "v26.7.0": {
        "driver": ("nvcr.io/nvidia", "driver", "595.91.07"),
        "toolkit": ("nvcr.io/nvidia/k8s", "container-toolkit", "v1.20.0"),
        "devicePlugin": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
        "dcgmExporter": ("nvcr.io/nvidia/k8s", "dcgm-exporter", "4.6.0-4.8.3-distroless"),
        "gfd": ("nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
        "migManager": ("nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.15.0"),
        "validator": ("nvcr.io/nvidia", "gpu-operator", "v26.7.0"),
        "manager": ("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.12.0"),
    },
}
#: The chart's driver kernel module switch at each tag (values.yaml@v24.9.2 ``useOpenKernelModules: false``,
#: @v25.10.0 and @v26.7.0 ``kernelModuleType: "auto"``, useOpenKernelModules a no-op there).
CHART_KERNEL_MODULES: dict[str, dict[str, Any]] = {
    "v24.9.2": {"useOpenKernelModules": False},
    "v25.10.0": {"kernelModuleType": "auto"},
    "v26.7.0": {"kernelModuleType": "auto"},
}
#: What the operator reads off the nodes for the driver's tag and the precompiled DaemonSet's name: NFD's kernel
#: and OS labels (kernelFullVersion, object_controls.go@<tag>).
KERNEL = "5.15.0-1041-azure"
OS_TAG = "ubuntu22.04"
#: DefaultDriverInstallDir (object_controls.go@v25.10.0).
DEFAULT_INSTALL_DIR = "/run/nvidia/driver"
#: The runtime the operator detected on the nodes (transformForRuntime's ``runtime``).
RUNTIME = "containerd"


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def _asset(tag: str, state: str) -> Obj:
    """The asset file as NVIDIA ships it (shared: `_fill` copies it before filling)."""
    (path,) = (ASSETS / tag / STATE_DIRS[state]).glob("*_daemonset.yaml")
    return dict(_load(path))


@functools.cache
def _sample() -> dict[str, Any]:
    return dict(_load(FIXTURES / "gpu-operator-v1_clusterpolicy.yaml")["spec"])


def _on(block: dict[str, Any] | None, default: bool = True) -> bool:
    """``IsEnabled`` of a block (api/nvidia/v1/clusterpolicy_types.go@<tag>): unset is the block's default."""
    if not isinstance(block, dict) or block.get("enabled") is None:
        return default
    return bool(block["enabled"])


def _image_path(block: dict[str, Any]) -> str:
    """gpuv1.ImagePath (api/nvidia/v1/clusterpolicy_types.go@v25.10.0 imagePath): ``repository/image:version``,
    ``@version`` for a digest."""
    version = str(block["version"])
    return f"{block['repository']}/{block['image']}{'@' if version.startswith('sha256:') else ':'}{version}"


def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    """setContainerEnv (NVIDIA/gpu-operator controllers/object_controls.go@v25.10.0): replace the variable's value,
    or append it."""
    env = container.setdefault("env", [])
    for entry in env:
        if entry["name"] == name:
            entry["value"] = value
            return
    env.append({"name": name, "value": value})


def _add_env(container: dict[str, Any], entries: list[dict[str, str]] | None) -> None:
    for entry in entries or []:
        _set_env(container, entry["name"], entry["value"])


def _named(containers: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(c for c in containers if c["name"] == name)


def _drop(containers: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [c for c in containers if c["name"] != name]


def _common(pod: dict[str, Any], spec: dict[str, Any]) -> None:
    """What the operator applies to every operand before its own transform (object_controls.go@v25.10.0, the
    daemonset preprocessing): applyCommonDaemonsetConfig's ``daemonsets.tolerations``, where set, in place of the
    asset's; transformForDriverInstallDir's ``hostPaths.driverInstallDir`` on the ``driver-install-dir`` volume and
    the driver-validation init container, where not the default."""
    tolerations = (spec.get("daemonsets") or {}).get("tolerations")
    if tolerations:
        pod["tolerations"] = copy.deepcopy(tolerations)
    install_dir = (spec.get("hostPaths") or {}).get("driverInstallDir") or DEFAULT_INSTALL_DIR
    volume = next((v for v in pod.get("volumes") or [] if v["name"] == "driver-install-dir"), None)
    if install_dir == DEFAULT_INSTALL_DIR or volume is None:
        return
    volume["hostPath"]["path"] = install_dir
    for init in pod.get("initContainers") or []:
        if init["name"] == "driver-validation":
            _set_env(init, "DRIVER_INSTALL_DIR", install_dir)
            _set_env(init, "DRIVER_INSTALL_DIR_CTR_PATH", install_dir)


def _validation_inits(pod: dict[str, Any], spec: dict[str, Any]) -> None:
    """transformValidationInitContainer (object_controls.go@<tag>): every ``*validation*`` init container runs the
    validator's image; ``driver*`` ones take validator.driver.env, ``toolkit*`` ones validator.toolkit.env."""
    validator = spec["validator"]
    for init in pod.get("initContainers") or []:
        if "validation" not in init["name"]:
            continue
        for component in ("driver", "toolkit"):
            if init["name"].startswith(component):
                _add_env(init, (validator.get(component) or {}).get("env"))
        init["image"] = _image_path(validator)


def _driver(tag: str, ds: Obj, pod: dict[str, Any], spec: dict[str, Any], kernel: str) -> None:
    """TransformDriver (object_controls.go@<tag>) for the nodes of one kernel."""
    driver = spec["driver"]
    rdma = driver.get("rdma") or {}
    # transformDriverManagerInitContainer: driver.manager's image, GPU_DIRECT_RDMA_ENABLED / USE_HOST_MOFED, its env.
    manager = _named(pod["initContainers"], "k8s-driver-manager")
    manager["image"] = _image_path(driver["manager"])
    if _on(rdma, default=False):
        _set_env(manager, "GPU_DIRECT_RDMA_ENABLED", "true")
        if rdma.get("useHostMofed"):
            _set_env(manager, "USE_HOST_MOFED", "true")
    _add_env(manager, driver["manager"].get("env"))
    # transformDriverContainer + resolveDriverTag: ImagePath plus "-<os tag>", or, precompiled,
    # repository/image:version-<kernel> plus "-<os tag>"; driver.env on Containers[0].
    precompiled = bool(driver.get("usePrecompiled"))
    base = f"{driver['repository']}/{driver['image']}:{driver['version']}-{kernel}" if precompiled else None
    image = base or _image_path(driver)
    image = image if "sha256:" in image else f"{image}-{OS_TAG}"
    main = _named(pod["containers"], "nvidia-driver-ctr")
    main["image"] = image
    if tag == "v24.9.2":
        # transformDriverContainer@v24.9.2: OPEN_KERNEL_MODULES_ENABLED from useOpenKernelModules.
        if driver.get("useOpenKernelModules"):
            _set_env(main, "OPEN_KERNEL_MODULES_ENABLED", "true")
    elif kind := driver.get("kernelModuleType"):
        # transformDriverContainer@v25.10.0: KERNEL_MODULE_TYPE, and OPEN_KERNEL_MODULES_ENABLED for open.
        _set_env(main, "KERNEL_MODULE_TYPE", kind)
        if kind == "open":
            _set_env(main, "OPEN_KERNEL_MODULES_ENABLED", "true")
    if _on(rdma, default=False):
        _set_env(main, "GPU_DIRECT_RDMA_ENABLED", "true")
    _add_env(pod["containers"][0], driver.get("env"))
    # transformPeerMemoryContainer, transformGDSContainer, transformGDRCopyContainer: a sidecar stays only for its
    # enabled feature; transformOpenShiftDriverToolkitContainer: the DTK sidecar only on OpenShift (not here).
    kept = {
        "nvidia-peermem-ctr": _on(rdma, default=False),
        "nvidia-fs-ctr": _on(spec.get("gds"), default=False),
        "nvidia-gdrcopy-ctr": _on(spec.get("gdrcopy"), default=False),
        "openshift-driver-toolkit-ctr": False,
    }
    for sidecar, keep in kept.items():
        if not keep:
            pod["containers"] = _drop(pod["containers"], sidecar)
    if precompiled:
        # transformPrecompiledDriverDaemonset: name += "-" + getSanitizedKernelVersion + "-" + the OS tag.
        ds["metadata"]["name"] += f"-{kernel}-{OS_TAG}"


def _cdi_on(spec: dict[str, Any]) -> bool:
    return _on(spec.get("cdi"), default=False)


def _toolkit(tag: str, ds: Obj, pod: dict[str, Any], spec: dict[str, Any]) -> None:
    """TransformToolkit (object_controls.go@<tag>)."""
    main = _named(pod["containers"], "nvidia-container-toolkit-ctr")
    main["image"] = _image_path(spec["toolkit"])
    if _cdi_on(spec):
        if tag == "v24.9.2":
            # TransformToolkit@v24.9.2: CDI_ENABLED, the annotation prefixes, CRIO_CONFIG_MODE; the runtime's mode
            # cdi only where cdi.default (CDI.IsDefault()).
            _set_env(main, "CDI_ENABLED", "true")
            _set_env(main, "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES", "nvidia.cdi.k8s.io/")
            _set_env(main, "CRIO_CONFIG_MODE", "config")
            if spec["cdi"].get("default"):
                _set_env(main, "NVIDIA_CONTAINER_RUNTIME_MODE", "cdi")
        else:
            # transformToolkitCtrForCDI@v25.10.0 and @v26.7.0: cdi.default is gone, the mode is cdi whenever CDI is.
            for name, value in (
                ("CDI_ENABLED", "true"),
                ("NVIDIA_RUNTIME_SET_AS_DEFAULT", "false"),
                ("NVIDIA_CONTAINER_RUNTIME_MODE", "cdi"),
                ("CRIO_CONFIG_MODE", "config"),
            ):
                _set_env(main, name, value)
    _add_env(main, spec["toolkit"].get("env"))
    # transformForRuntime: RUNTIME and, for containerd, CONTAINERD_RUNTIME_CLASS.
    _set_env(main, "RUNTIME", RUNTIME)
    _set_env(main, "CONTAINERD_RUNTIME_CLASS", spec["operator"].get("runtimeClass") or "nvidia")


def _mig(container: dict[str, Any], spec: dict[str, Any]) -> None:
    """applyMIGConfiguration (object_controls.go@<tag>)."""
    strategy = (spec.get("mig") or {}).get("strategy") or ""
    if strategy:
        _set_env(container, "MIG_STRATEGY", strategy)
    if strategy != "none":
        _set_env(container, "NVIDIA_MIG_MONITOR_DEVICES", "all")


def _runtime_class(pod: dict[str, Any], spec: dict[str, Any]) -> None:
    """setRuntimeClassName (object_controls.go@<tag>): every runtime but cri-o without CDI."""
    pod["runtimeClassName"] = spec["operator"].get("runtimeClass") or "nvidia"


def _device_plugin(tag: str, ds: Obj, pod: dict[str, Any], spec: dict[str, Any]) -> None:
    """TransformDevicePlugin (object_controls.go@<tag>)."""
    main = _named(pod["containers"], "nvidia-device-plugin")
    main["image"] = _image_path(spec["devicePlugin"])
    _runtime_class(pod, spec)
    _mig(main, spec)
    if _cdi_on(spec):
        # TransformDevicePlugin@v24.9.2 inline, transformDevicePluginCtrForCDI@v25.10.0.
        _set_env(main, "CDI_ENABLED", "true")
        _set_env(
            main, "DEVICE_LIST_STRATEGY", "envvar,cdi-annotations" if tag == "v24.9.2" else "cdi-annotations,cdi-cri"
        )
        _set_env(main, "CDI_ANNOTATION_PREFIX", "nvidia.cdi.k8s.io/" if tag == "v24.9.2" else "cdi.k8s.io/")
        if _on(spec["toolkit"]):
            _set_env(main, "NVIDIA_CDI_HOOK_PATH", "/usr/local/nvidia/toolkit/nvidia-cdi-hook")
    if _on(spec.get("gds"), default=False):
        _set_env(main, "GDS_ENABLED", "true")
        _set_env(main, "MOFED_ENABLED", "true")
    if _on(spec.get("gdrcopy"), default=False):
        _set_env(main, "GDRCOPY_ENABLED", "true")
    _add_env(main, spec["devicePlugin"].get("env"))


def _first_container(key: str, *, mig: bool = False, runtime_class: bool = True) -> Any:
    """TransformGPUDiscoveryPlugin, TransformDCGMExporter, TransformMIGManager (object_controls.go@<tag>): the
    block's image and ``env`` on Containers[0]; GFD's MIG_STRATEGY; the MIG manager's CDI env."""

    def fill(tag: str, ds: Obj, pod: dict[str, Any], spec: dict[str, Any]) -> None:
        main = pod["containers"][0]
        main["image"] = _image_path(spec[key])
        if runtime_class:
            _runtime_class(pod, spec)
        if mig:
            _mig(main, spec)
        if key == "migManager" and _cdi_on(spec):
            _set_env(main, "CDI_ENABLED", "true")
            if _on(spec["toolkit"]):
                _set_env(main, "NVIDIA_CDI_HOOK_PATH", "/usr/local/nvidia/toolkit/nvidia-cdi-hook")
        if key == "dcgmExporter" and _on(spec.get("dcgm"), default=False):
            # TransformDCGMExporter: the standalone hostengine's address where dcgm.enabled.
            _set_env(main, "DCGM_REMOTE_HOSTENGINE_INFO", "nvidia-dcgm:5555")
        _add_env(main, spec[key].get("env"))

    return fill


def _validator(tag: str, ds: Obj, pod: dict[str, Any], spec: dict[str, Any]) -> None:
    """TransformValidator: TransformValidatorShared (the main container's image and validator.env) and
    TransformValidatorComponent for each ``<component>-validation`` init container (object_controls.go@<tag>)."""
    validator = spec["validator"]
    image = _image_path(validator)
    main = pod["containers"][0]
    main["image"] = image
    _add_env(main, validator.get("env"))
    _runtime_class(pod, spec)
    drop = {
        "plugin-validation": not _on(spec["devicePlugin"]),
        "nvidia-fs-validation": not _on(spec.get("gds"), default=False),
        "gdrcopy-validation": not _on(spec.get("gdrcopy"), default=False),
    }
    pod["initContainers"] = [c for c in pod["initContainers"] if not drop.get(c["name"])]
    for init in pod["initContainers"]:
        init["image"] = image
        component = init["name"].removesuffix("-validation")
        if component in ("cuda", "plugin"):
            _set_env(init, "VALIDATOR_IMAGE", image)
            _set_env(init, "VALIDATOR_RUNTIME_CLASS", pod["runtimeClassName"])
        if component == "plugin":
            _set_env(init, "MIG_STRATEGY", (spec.get("mig") or {}).get("strategy") or "")
        _add_env(init, (validator.get(component) or {}).get("env"))


FILLS = {
    "container-toolkit": _toolkit,
    "device-plugin": _device_plugin,
    "gpu-feature-discovery": _first_container("gfd", mig=True),
    "dcgm-exporter": _first_container("dcgmExporter"),
    "mig-manager": _first_container("migManager"),
    "operator-validation": _validator,
}


def _fill(tag: str, state: str, spec: dict[str, Any], kernel: str = KERNEL) -> Obj | None:
    """The operand DaemonSet NVIDIA's operator renders for ``spec`` at ``tag`` (the driver's for the nodes of
    ``kernel``); None for a switched-off operand, whose state the operator skips."""
    if not _on(spec[POLICY_KEYS[state]]):
        return None
    ds = copy.deepcopy(_asset(tag, state))
    ds["metadata"]["namespace"] = NAMESPACE
    pod = ds["spec"]["template"]["spec"]
    _common(pod, spec)
    if state != "operator-validation":
        _validation_inits(pod, spec)
    if state == "driver":
        _driver(tag, ds, pod, spec, kernel)
    else:
        FILLS[state](tag, ds, pod, spec)
    return ds


def _policy(tag: str, **changes: dict[str, Any]) -> dict[str, Any]:
    """NVIDIA's sample ClusterPolicy (fixtures/gpu-operator-v1_clusterpolicy.yaml) with the chart's images at
    ``tag`` and ``changes`` merged over its blocks."""
    spec = copy.deepcopy(_sample())
    spec["driver"] = {**spec["driver"], **CHART_KERNEL_MODULES[tag]}
    for key, block in changes.items():
        spec[key] = {**(spec.get(key) or {}), **copy.deepcopy(block)}
    for key, parts in CHART_IMAGES[tag].items():
        target = spec["driver"].setdefault("manager", {}) if key == "manager" else spec.setdefault(key, {})
        for name, value in zip(("repository", "image", "version"), parts, strict=True):
            target.setdefault(name, value)
    return spec


def _read(tag: str, spec: dict[str, Any], kernels: tuple[str, ...] = (KERNEL,)) -> dict[str, Any]:
    """infer_policy's spec from the DaemonSets rendered for ``spec``; precompiled drivers get one DaemonSet per
    kernel of ``kernels`` (precompiledDriverDaemonsets, object_controls.go@<tag>)."""
    drivers = kernels if spec["driver"].get("usePrecompiled") else (KERNEL,)
    states = [(state, kernel) for state in STATE_DIRS for kernel in (drivers if state == "driver" else (KERNEL,))]
    rendered = [ds for state, kernel in states if (ds := _fill(tag, state, spec, kernel)) is not None]
    snapshot = Snapshot(
        namespace="",
        policies=[],
        nodes=[],
        pods=[],
        daemonsets=rendered,
        configmaps=[],
        runtime_classes=[],
        events=[],
        absent=frozenset({"clusterpolicies"}),
    )
    prefixes = {DRIVER_PREFIX: "driver", PRECOMPILED_PREFIX: "driver"}
    found = infer_policy(snapshot, NAMESPACE, DAEMONSETS, CONTAINERS, prefixes)
    assert found is not None
    return dict(found[0]["spec"])


def _image_of(block: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(block.get(k) for k in ("repository", "image", "version"))


@functools.cache
def _asset_env() -> dict[str, dict[str, dict[str, str]]]:
    """The literal env each container of the asset files carries: container -> tag -> name -> value."""
    found: dict[str, dict[str, dict[str, str]]] = {}
    for tag in TAGS:
        for state in STATE_DIRS:
            pod = _asset(tag, state)["spec"]["template"]["spec"]
            for container in [*(pod.get("initContainers") or []), *pod["containers"]]:
                literal = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}
                found.setdefault(container["name"], {}).setdefault(tag, {}).update(literal)
    return found


def _shown(tag: str, container: str, env: list[dict[str, str]] | None) -> dict[str, str]:
    """What the rendered DaemonSet shows of a block's ``env`` (by name: setContainerEnv overwrites an asset's entry
    where it stands, so the order is the asset's). An entry with the value the asset carries at every tag may be the
    asset's own, so it cannot show as the policy's (whichever tags carry the variable); a variable whose asset default differs between tags shows with
    the value that runs, the policy's or the asset's at ``tag``."""
    per_tag = _asset_env().get(container, {})
    names = {name for values in per_tag.values() for name in values}
    agreed = {
        name: values.pop()
        for name in names
        if len(values := {carried[name] for carried in per_tag.values() if name in carried}) == 1
    }
    varying = {name: value for name, value in per_tag.get(tag, {}).items() if name not in agreed}
    given = {e["name"]: e["value"] for e in env or [] if agreed.get(e["name"]) != e["value"]}
    return {**{k: v for k, v in varying.items() if k not in OPERATOR_ENV}, **given}


def _got_env(block: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in block.get("env") or []}


def _assert_read_back(tag: str, spec: dict[str, Any], got: dict[str, Any]) -> None:
    """Every field infer_policy claims to read equals the policy's: switches, images, env, cdi, MIG, runtime class."""
    for key in POLICY_KEYS.values():
        assert got[key]["enabled"] is _on(spec[key]), key
    for state, key in POLICY_KEYS.items():
        if key == "driver" or not _on(spec[key]):
            continue
        assert _image_of(got[key]) == _image_of(spec[key]), key
        assert _got_env(got[key]) == _shown(tag, CONTAINERS[state], spec[key].get("env")), key
    if _on(spec["driver"]):
        assert _image_of(got["driver"]) == _image_of(spec["driver"])
        assert bool(got["driver"].get("usePrecompiled")) is bool(spec["driver"].get("usePrecompiled"))
        assert _got_env(got["driver"]) == _shown(tag, CONTAINERS["driver"], spec["driver"].get("env"))
        manager = spec["driver"]["manager"]
        assert _image_of(got["driver"]["manager"]) == _image_of(manager)
        assert _got_env(got["driver"]["manager"]) == _shown(tag, "k8s-driver-manager", manager.get("env"))
        assert got["driver"]["rdma"]["enabled"] is _on(spec["driver"].get("rdma"), default=False)
        if tag == "v24.9.2":
            assert "kernelModuleType" not in got["driver"]
            assert got["driver"].get("useOpenKernelModules", False) is bool(spec["driver"].get("useOpenKernelModules"))
        else:
            assert got["driver"]["kernelModuleType"] == spec["driver"]["kernelModuleType"]
            assert "useOpenKernelModules" not in got["driver"]
        assert got["gds"]["enabled"] is _on(spec.get("gds"), default=False)
    if _on(spec["toolkit"]):
        assert got["cdi"]["enabled"] is _cdi_on(spec)
        # cdi.default exists up to v25.3.x (api/nvidia/v1/clusterpolicy_types.go@v24.9.2 IsDefault; gone @v25.10.0).
        default = tag == "v24.9.2" and _cdi_on(spec) and bool(spec["cdi"].get("default"))
        assert got["cdi"].get("default", False) is default
        assert got["operator"]["defaultRuntime"] == RUNTIME
    if _on(spec["devicePlugin"]) or _on(spec["gfd"]):
        assert got["mig"] == {"strategy": spec["mig"]["strategy"]}
    if _on(spec["devicePlugin"]):
        assert got["operator"]["runtimeClass"] == spec["operator"]["runtimeClass"]
    asset_tolerations = _asset(tag, "operator-validation")["spec"]["template"]["spec"]["tolerations"]
    assert got["daemonsets"]["tolerations"] == ((spec.get("daemonsets") or {}).get("tolerations") or asset_tolerations)
    install_dir = (spec.get("hostPaths") or {}).get("driverInstallDir") or DEFAULT_INSTALL_DIR
    assert got["hostPaths"]["driverInstallDir"] == install_dir
    for component in ("driver", "toolkit", "cuda", "plugin"):
        wanted = _shown(tag, f"{component}-validation", (spec["validator"].get(component) or {}).get("env"))
        assert _got_env(got["validator"].get(component) or {}) == wanted, component


PLUGIN_ENV = [{"name": "DP_DISABLE_HEALTHCHECKS", "value": "xids"}, {"name": "PASS_DEVICE_SPECS", "value": "false"}]
#: The ClusterPolicies the tests render: name -> the blocks changed from NVIDIA's sample.
POLICIES: dict[str, dict[str, dict[str, Any]]] = {
    "defaults": {},
    "driver off": {"driver": {"enabled": False}},
    "toolkit off, device plugin env": {"toolkit": {"enabled": False}, "devicePlugin": {"env": PLUGIN_ENV}},
    "precompiled driver": {"driver": {"usePrecompiled": True, "version": "550"}},
    "open kernel modules": {"driver": {"kernelModuleType": "open", "useOpenKernelModules": True}},
    "own tolerations, driver installed under /home/kubernetes": {
        "daemonsets": {"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]},
        "hostPaths": {"driverInstallDir": "/home/kubernetes/bin/nvidia"},
    },
    "cdi on": {"cdi": {"enabled": True}},
    "cdi on as the default runtime mode": {"cdi": {"enabled": True, "default": True}},
    "mig manager off, mixed strategy": {"migManager": {"enabled": False}, "mig": {"strategy": "mixed"}},
    "env everywhere": {
        "driver": {"env": [{"name": "KERNEL_MODULE_TYPE_HINT", "value": "open"}]},
        "toolkit": {"env": [{"name": "CONTAINERD_SET_AS_DEFAULT", "value": "false"}]},
        "dcgmExporter": {"env": [{"name": "DCGM_EXPORTER_LISTEN", "value": ":9500"}]},
        "gfd": {"env": [{"name": "GFD_SLEEP_INTERVAL", "value": "10m"}]},
        "migManager": {"env": [{"name": "WITH_REBOOT", "value": "true"}]},
        "validator": {
            "plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "true"}]},
            "cuda": {"env": [{"name": "CUDA_VALIDATION_TIMEOUT", "value": "600"}]},
        },
    },
    "rdma, gds and gdrcopy on, driver manager drains": {
        "driver": {
            "rdma": {"enabled": True},
            "manager": {"env": [{"name": "DRAIN_USE_FORCE", "value": "true"}]},
        },
        "gds": {"enabled": True},
        "gdrcopy": {"enabled": True},
    },
}


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize("policy", POLICIES)
def test_nvidia_assets_read_back_as_the_policy_that_rendered_them(tag: str, policy: str) -> None:
    spec = _policy(tag, **POLICIES[policy])
    _assert_read_back(tag, spec, _read(tag, spec))


@pytest.mark.parametrize("tag", TAGS)
def test_precompiled_drivers_on_two_kernels_read_back_as_one_driver_block(tag: str) -> None:
    """One driver DaemonSet per kernel, each image tagged for its kernel: the branch, repository and image they
    share are the policy's."""
    spec = _policy(tag, driver={"usePrecompiled": True, "version": "570"})
    got = _read(tag, spec, kernels=(KERNEL, "6.8.0-1021-azure"))
    assert _image_of(got["driver"]) == _image_of(spec["driver"]) and got["driver"]["usePrecompiled"] is True
