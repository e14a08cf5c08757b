"""Where the node's runtime reads the NVIDIA runtime from, and what the hook and the driver container say when they
cannot do their part, each with the repair that holds on that node:

- libnvidia-container on cgroup v2 rebuilds runc's eBPF device program; a kernel hardening privileged eBPF JIT
  (net.core.bpf_jit_harden=2) cannot hand it back, and the verifier refuses the rebuilt one
  (NVIDIA/libnvidia-container src/nvcgo/internal/cgroup/ebpf.go@e9bfd224750c5641db0d506626dbe4f6c1156088;
  bottlerocket-os/bottlerocket#2504);
- curl's refusal by a proxy ("Received HTTP code %d from proxy after CONNECT", curl lib/http_proxy.c@curl-7_61_1) in
  the driver container: NO_PROXY lacks what it called;
- toolkit v1.17 builds the runtime from the host's `containerd config dump` (NVIDIA/nvidia-container-toolkit
  tools/container/runtime/containerd/containerd.go@v1.17.0), not from the CONTAINERD_CONFIG it was given;
- containerd 1.3 to 1.7 take the default runtime from default_runtime_name of a version 2 config;
- k3s and RKE2 render config.toml from config.toml.tmpl at every start (docs.rke2.io advanced, "Configuring
  containerd"), so a toolkit pointed at the rendered file loses its default runtime;
- bash's "%s: command not found" (bminor/bash execute_cmd.c@bash-5.2) for nvidia-smi in a GPU pod.

The fixtures are written here from those sources; names, versions and paths of the nodes are made up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.small_cluster import crashing_pod, diagnosed, no_gpus, plugin_pod

from gpuchain.doctor import catalog
from gpuchain.doctor.links.runtime_default import config_version_note
from gpuchain.doctor.model import Finding, Report, Severity
from gpuchain.doctor.stacks import NVIDIA_CLUSTER_POLICY
from gpuchain.sim.build import SimCluster


def _roots(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.root and f.severity is Severity.ERROR]


def _one(report: Report, fid: str) -> Finding:
    (found,) = [f for f in report.findings if f.id == fid]
    return found


#: The hook's stderr as runc quotes it: libnvidia-container's nvcgo errors wrapped around cilium/ebpf's verifier
#: refusal ("load program: invalid argument: <verifier log>").
FILTER = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
    "unable to start container process: error during container init: error running prestart hook #0: exit status 1, "
    "stdout: , stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: mount error: failed to add device rules: "
    "unable to generate new device filter program from existing programs: unable to create new device filters "
    "program: load program: invalid argument: last insn is not an exit or jmp\nprocessed 0 insns: unknown"
)
PLUGIN = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, preset: l4-x2, hostDriver: 550.54.15}\n"


def test_a_device_filter_the_kernel_refuses_is_repaired_on_the_nodes_ebpf_hardening() -> None:
    refused = {
        "name": "nvidia-device-plugin-ctr",
        "restarts": 9,
        "state": {"waiting": "CrashLoopBackOff"},
        "last": {"terminated": "StartError", "exitCode": 128, "message": FILTER},
    }
    (root,) = _roots(diagnosed(PLUGIN, no_gpus("n1"), plugin_pod("n1", refused)))
    assert (root.id, root.link) == ("toolkit.hook-failed", "toolkit")
    assert "net.core.bpf_jit_harden=1" in root.fix and "systemd.unified_cgroup_hierarchy=0" in root.fix
    assert any("libnvidia-container.device-filter-rejected" in e for e in root.evidence)


OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1, preset: t4-x4}\n"
#: The driver container's call of the API service through a proxy that refuses it (curl's error 56 text).
PROXIED = (
    "+ curl -fsSL https://10.96.0.1:443/apis/config.openshift.io/v1/clusterversions/version\n"
    "curl: (56) Received HTTP code 403 from proxy after CONNECT\n"
)


def test_a_proxy_refusing_the_driver_containers_call_names_no_proxy() -> None:
    driver = crashing_pod("nvidia-driver-daemonset", "nvidia-driver-ctr", "n1", PROXIED)
    (root,) = _roots(diagnosed(OPERATOR, driver))
    assert root.link == "driver" and "NO_PROXY" in root.fix and "service network" in root.fix
    assert "proxy refused the tunnel" in root.cause


def _toolkit(env: dict[str, str], version: str) -> Callable[[SimCluster], None]:
    """An edit: the ClusterPolicy's toolkit env and the toolkit pod's image at ``version``."""

    def edit(sim: SimCluster) -> None:
        from gpuchain.kube import POD

        (policy,) = sim.cluster.list(NVIDIA_CLUSTER_POLICY)
        spec = {"toolkit": {"env": [{"name": k, "value": v} for k, v in env.items()], "version": version}}
        sim.cluster.patch(NVIDIA_CLUSTER_POLICY, name=policy["metadata"]["name"], patch={"spec": spec})
        for pod in sim.cluster.list(POD):
            if pod["metadata"]["name"].startswith("nvidia-container-toolkit"):
                containers = [
                    {**c, "image": f"nvcr.io/nvidia/k8s/container-toolkit:{version}"} for c in pod["spec"]["containers"]
                ]
                name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
                sim.cluster.patch(POD, name=name, namespace=ns, patch={"spec": {"containers": containers}})

    return edit


#: The kubelet's Event for a sandbox containerd has no handler for (containerd internal/cri: "no runtime for %q is
#: configured").
NO_HANDLER = {
    "do": "pod",
    "daemonset": "nvidia-device-plugin-daemonset",
    "node": "n1",
    "init": [{"name": "toolkit-validation", "state": {"waiting": "ContainerCreating"}}],
    "events": [
        {
            "reason": "FailedCreatePodSandBox",
            "count": 4,
            "message": "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: "
            'no runtime for "nvidia" is configured',
        }
    ],
}
OWN_CONFIG = {"CONTAINERD_CONFIG": "/etc/k0s/containerd.d/nvidia.toml", "CONTAINERD_SOCKET": "/run/k0s/containerd.sock"}


def _runtime_fix(env: dict[str, str], version: str) -> str:
    return _one(diagnosed(OPERATOR, _toolkit(env, version), NO_HANDLER), "toolkit.runtime-not-configured").fix


def test_a_toolkit_that_reads_config_dump_pointed_at_its_own_config_is_told_to_read_the_file() -> None:
    on_118 = _runtime_fix(OWN_CONFIG, "v1.18.1-ubuntu20.04")
    assert "RUNTIME_CONFIG_SOURCE=file" in on_118 and "move the toolkit to v1.18.0" not in on_118
    on_117 = _runtime_fix(OWN_CONFIG, "v1.17.4-ubuntu20.04")
    assert "move the toolkit to v1.18.0 or later and set RUNTIME_CONFIG_SOURCE=file" in on_117
    # Before v1.17 the toolkit reads the file; on the distribution's own file the dump is that containerd's.
    assert "RUNTIME_CONFIG_SOURCE" not in _runtime_fix(OWN_CONFIG, "v1.16.2-ubuntu20.04")
    kubeadm = {"CONTAINERD_CONFIG": "/etc/containerd/config.toml"}
    assert "RUNTIME_CONFIG_SOURCE" not in _runtime_fix(kubeadm, "v1.18.1-ubuntu20.04")
    # Told to read the file already: the dump is not what it read.
    assert "RUNTIME_CONFIG_SOURCE=file in" not in _runtime_fix(
        {**OWN_CONFIG, "RUNTIME_CONFIG_SOURCE": "file"}, "v1.18.1"
    )


def _node(runtime: str) -> dict[str, Any]:
    return {"status": {"nodeInfo": {"containerRuntimeVersion": runtime}}}


def test_containerd_1_3_to_1_7_take_their_default_runtime_from_a_version_2_config() -> None:
    assert "default_runtime_name" in config_version_note(_node("containerd://1.3.0"))
    assert "version = 2" in config_version_note(_node("containerd://1.7.27"))
    assert config_version_note(_node("containerd://1.2.13")) == ""
    assert config_version_note(_node("containerd://2.1.4")) == ""
    assert config_version_note(_node("cri-o://1.30.2")) == ""


RKE2 = (
    "name: t\nstack: gpu-operator\npolicy:\n  driver: {{enabled: false}}\n  toolkit:\n    env:\n"
    "      - {{name: CONTAINERD_CONFIG, value: {config}}}\n"
    "      - {{name: CONTAINERD_SOCKET, value: /run/k3s/containerd/containerd.sock}}\n      - {{name: CONTAINERD_SET_AS_DEFAULT, value: 'true'}}\n"
    "nodes:\n  - {{name: n1, preset: l4-x2, hostDriver: 550.90.07, distribution: {dist}}}\n"
    "workloads:\n  - {{name: smoke, namespace: default, count: 2, node: n1}}\n"
)
#: bash's words for a command on no PATH entry, for the driver binary the NVIDIA runtime mounts.
NO_SMI = {
    "do": "pod",
    "daemonset": "smoke",
    "namespace": "default",
    "node": "n1",
    "containers": [
        {
            "name": "main",
            "restarts": 3,
            "state": {"waiting": "CrashLoopBackOff"},
            "last": {"terminated": "Error", "exitCode": 127},
        }
    ],
    "logs": {"main": "/bin/bash: line 1: nvidia-smi: command not found\n"},
}


def test_a_toolkit_writing_the_config_rke2_renders_again_is_pointed_at_its_template() -> None:
    rendered = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"
    found = _one(diagnosed(RKE2.format(config=rendered, dist="rke2"), NO_SMI), "workload.no-driver-in-pod")
    assert found.link == "toolkit" and f"{rendered}.tmpl" in found.fix
    assert found.action is not None and found.action.target == "cluster-policy"
    assert any("bash.driver-binary-not-found" in e for e in found.evidence)
    # Already on the template: the pods' RuntimeClass, not the template again.
    kept = _one(diagnosed(RKE2.format(config=f"{rendered}.tmpl", dist="rke2"), NO_SMI), "workload.no-driver-in-pod")
    assert "runtimeClassName" in kept.fix and ".tmpl" not in kept.fix


def test_bash_not_finding_a_driver_binary_is_known_and_other_commands_are_not() -> None:
    assert catalog.find("bash: nvidia-smi: command not found", "bash.driver-binary-not-found") is not None
    assert catalog.find("bash: python3: command not found", "bash.driver-binary-not-found") is None
