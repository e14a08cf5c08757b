"""A real Kubernetes node for tests: containerd v2 + runc + the real kubelet, with the real scheduler.

The binaries come from scripts/build-peers (kubelet v1.37.2 from tests/peers/go.mod, containerd
v2.2 from tests/peers/containerd/go.mod, Debian's runc), and so do the node's two images (a static
pause program and busybox-static as OCI archives, imported with ``ctr images import``: no
registry is ever asked). ``real_node(workdir)`` starts the control plane (etcd, kube-apiserver,
kube-controller-manager: peers/apiserver.py) and kube-scheduler (v1.37.2), then the node in
namespaces of its own, and on exit
stops everything and checks that nothing is left (``leftovers``).

Every setting below that is not a default is here for a reason found by running it; each says why:

- **Namespaces** (``unshare --mount --net --pid --fork --kill-child --mount-proc``). One process,
  the node's init, is PID 1 of a new PID namespace; containerd, the kubelet, the shims, the
  containers and whatever a test runs on the node (``RealNode.spawn``/``run``, through
  ``nsenter``) are inside it, so killing the init kills all of them: nothing survives a test,
  however it ends (``--kill-child`` does the same if the test process itself dies).
  - *Mount namespace*: the kubelet deletes every socket in ``/var/lib/kubelet/device-plugins``
    when it starts, and that path is hard-coded (``--root-dir`` does not move it), so on the
    machine's own mount table it would delete the sockets of any other device plugin there. In
    the node's namespace ``/var/lib`` is an overlay over the machine's (writes land in the
    workdir) with ``WORKDIR/device-plugins`` bound on ``/var/lib/kubelet/device-plugins``, so the
    tests see the node's socket directory at ``RealNode.device_plugins``. ``/run`` (containerd's
    state, its shims' sockets under the hard-coded ``/run/containerd/s``, runc's state) and
    ``/var/log`` (the kubelet's ``/var/log/pods`` and ``/var/log/containers``) are private tmpfs.
    Every mount made there (these, the kubelet's volume mounts, containerd's overlay rootfs
    mounts) is private to the namespace and goes with it.
  - *Network namespace*: the kubelet refuses a loopback ``--node-ip`` and checks that the address
    is on one of the node's interfaces; adding one to the machine is not ours to do. The node has
    its own loopback and an interface holding ``NODE_IP``: a ``dummy`` one (it drops what is sent
    to it), or where the kernel has no dummy driver (this CI machine's) a veth pair with both ends
    in the namespace (nothing forwards from it). Either way nothing leaves the namespace. The control plane stays on the machine's loopback; the
    kubelet reaches it through peers/netns_relay.py, which listens on the node's
    ``127.0.0.1:6443`` (the API server's certificate names 127.0.0.1) and connects out from the
    machine's namespace. Nothing reaches the kubelet from outside, so ``kubectl logs``/``exec``
    do not work here: a container's output is read from ``/var/log/pods`` (``RealNode.pod_log``).
  - *No CNI*: the node has no network plugin, so pods run with ``hostNetwork: true`` (the node's
    namespace; their sandbox needs no CNI) and the runtime reports ``NetworkReady=false``.
- **Kernel settings**: at start the kubelet sets ``vm.overcommit_memory=1``, ``vm.panic_on_oom=0``,
  ``kernel.panic=10``, ``kernel.panic_on_oops=1``, ``kernel.keys.root_maxkeys`` and
  ``root_maxbytes`` (``setupKernelTunables``) unless they already hold those values, and those are
  not per namespace: they would change the whole machine. In the node's mount namespace each of
  those ``/proc/sys`` files is covered by a read-only file that already holds the kubelet's value,
  so it reads, finds nothing to change and writes nothing. (With stand-ins holding this machine's
  values instead, the kubelet stops: "Failed to start ContainerManager ... open
  /proc/sys/vm/overcommit_memory: read-only file system", and the same for kernel.panic and
  kernel.panic_on_oops: those three differ here, and it would have written them.)
- **cgroups** (v1 here: a hierarchy per controller under ``/sys/fs/cgroup``): kubelet v1.37 (as from 1.35) refuses
  cgroup v1 unless ``failCgroupV1: false``; the driver is ``cgroupfs`` (no systemd here). Pods go
  under a ``cgroupRoot`` of this node's own (``/gpuchain-node-<pid>``), which the kubelet
  requires to exist in every hierarchy before it starts ("cgroup [...] has some missing paths"): it is made here in each (cpuset's with
  its parent's ``cpus``/``mems``, which a new cpuset lacks) and removed, with everything the
  kubelet and runc made below it, when the node stops. With cgroup v2 the same root is made once.
- **containerd**: ``restrict_oom_score_adj = true`` where the capability bounding set lacks
  CAP_SYS_RESOURCE (``needs_restricted_oom_score_adj``; this CI machine's does): the kubelet asks
  for an ``oom_score_adj`` below containerd's own for every pod sandbox (-998) and Guaranteed
  container (-997), the kernel refuses a lower value without that capability, and runc fails
  ("can't get final child's PID from pipe: EOF"), so no pod starts at all; restricted, containerd
  raises such values to its own. CDI is
  on (``enable_cdi``, containerd 2's default) with spec directories private to the node. The
  sandbox image is the local pause image (the default, registry.k8s.io/pause, would be pulled).
- **kubelet**: ``imageGCHighThresholdPercent: 100`` (the images cannot be pulled again if garbage
  collection on a fuller disk removed them), eviction thresholds at their minimum (a busy CI disk
  must not evict a test's pod), ``failSwapOn: false`` (a machine with swap), authentication and
  authorization of the kubelet's own API off (nothing can reach it), ``nodeStatusUpdateFrequency:
  1s`` (a device plugin's resources reach the Node's capacity/allocatable at the next status
  update: seconds instead of ten), ``syncFrequency: 10s`` (a pod whose DRA Prepare failed is tried
  again only at its next sync: kuberuntime's SyncPod records FailedPrepareDynamicResources and
  returns no error, so the pod worker's 10 s error backoff does not apply, and the default minute,
  jittered by up to half, kept such a pod waiting 60 to 90 s), its client credentials are the test
  admin's.
- **Not-ready taint**: the kubelet registers its Node with ``node.kubernetes.io/not-ready:NoSchedule``
  and only the node lifecycle controller (not run: ``--controllers`` in peers/apiserver.py) takes
  it away. A pod bound by ``nodeName`` is not affected (the kubelet admits past NoSchedule
  taints); pods the real scheduler places tolerate it (``POD_TOLERATIONS``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from peers.apiserver import FEATURE_GATES, ApiServer, _b64, control_plane, write_kubeconfig
from peers.binaries import peer_or_skip

NODE_NAME = "gpuchain-node"
NODE_IP = "10.254.0.2"
"""The node's address, on a dummy interface inside the node's own network namespace."""
API_PORT_IN_NODE = 6443

#: What the kubelet's setupKernelTunables writes unless already there (pkg/kubelet/cm), by /proc/sys path.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}

PAUSE_IMAGE = "gpuchain.local/pause:1"
BUSYBOX_IMAGE = "gpuchain.local/busybox:1"

#: Pods the real scheduler places tolerate the kubelet's not-ready taint (no node lifecycle controller).
POD_TOLERATIONS = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}]

CGROUP_ROOT = Path("/sys/fs/cgroup")

T = TypeVar("T")

# The node's init: private mounts and network, then it stays PID 1 and reaps the orphans it gets
# (containerd's shims are re-parented to it).
_INIT = r"""
set -eu
W=$1
mount -t tmpfs -o mode=0755 gpuchain-node-run /run
mount -t tmpfs -o mode=0755 gpuchain-node-log /var/log
mkdir -p "$W/varlib/upper" "$W/varlib/work"
mount -t overlay gpuchain-node-varlib -o "lowerdir=/var/lib,upperdir=$W/varlib/upper,workdir=$W/varlib/work" /var/lib
mkdir -p /var/lib/kubelet/device-plugins /etc/cdi /var/run/cdi
mount --bind "$W/device-plugins" /var/lib/kubelet/device-plugins
mount -t tmpfs -o mode=0755 gpuchain-node-cdi /etc/cdi
for f in "$W"/sysctl/*; do
  target=/proc/sys/$(basename "$f" | tr . /)
  mount --bind "$f" "$target"
  mount -o remount,bind,ro "$target"
done
ip link set lo up
# a dummy interface where the kernel has them, else a veth pair with both ends in this namespace
if ip link add node0 type dummy 2>/dev/null; then :; else
  ip link add node0 type veth peer name node0-peer
  ip link set node0-peer up
fi
ip addr add "$2/24" dev node0
ip link set node0 up
ip route add default dev node0
echo ready >"$W/init-ready"
exec "$3" -c '
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
'
"""


def wait_for(what: str, check: Callable[[], T | None], timeout: float, interval: float = 0.1) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            last_error = exc
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{what}: not within {timeout:.0f}s" + (f" (last error: {last_error})" if last_error else "")
            )
        time.sleep(interval)


def needs_restricted_oom_score_adj() -> bool:
    """True when CAP_SYS_RESOURCE (24) is not in this process's bounding set (a lower oom_score_adj is refused)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return not (int(line.split()[1], 16) >> 24) & 1
    return True


def cgroup_hierarchies() -> list[Path]:
    """The directories the node's cgroup root is made in: each v1 hierarchy, or the v2 root."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return sorted(p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink())


def _remove_cgroup_tree(top: Path, deadline: float) -> None:
    """rmdir ``top`` and everything below it, deepest first (a cgroup goes once its tasks have exited)."""
    while top.exists():
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        busy = False
        for d in [*dirs, top]:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                busy = True
        if not busy or time.monotonic() > deadline:
            return
        time.sleep(0.1)


@dataclass
class RealNode:
    """A running node: the kubelet and containerd in their namespaces, next to ``api``."""

    api: ApiServer
    workdir: Path
    pid: int
    """The node's init (PID 1 of its PID namespace) as the machine sees it: its namespaces are /proc/PID/ns/*."""
    bins: dict[str, Path]
    cgroup_name: str
    stack: ExitStack
    kubelet: subprocess.Popen | None = None
    name: str = NODE_NAME
    kubelet_starts: int = 0

    # -- the node's namespaces ------------------------------------------------------------

    @property
    def device_plugins(self) -> Path:
        """The node's /var/lib/kubelet/device-plugins, as a path on the machine."""
        return self.workdir / "device-plugins"

    @property
    def root(self) -> Path:
        """The node's file system as the machine sees it (through its init's root)."""
        return Path(f"/proc/{self.pid}/root")

    def nsenter(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the node's mount, network and PID namespaces."""
        return ["nsenter", f"--target={self.pid}", "--mount", "--net", "--pid", "--", *argv]

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``argv`` on the node, its output in WORKDIR/logs/NAME.log; stopped when the node stops."""
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        out = (logs / f"{name}.log").open("ab")
        self.stack.callback(out.close)
        proc = subprocess.Popen(
            self.nsenter(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip
        self.stack.callback(stop_process, proc)
        return proc

    def run(self, argv: list[str], timeout: float = 60) -> str:
        """Run ``argv`` on the node to completion; its output, or an error that shows it."""
        done = subprocess.run(self.nsenter(argv), capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{argv} on the node exited {done.returncode}: {done.stdout}{done.stderr}")
        return done.stdout

    def log(self, name: str) -> str:
        path = self.workdir / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- the kubelet ----------------------------------------------------------------------

    def start_kubelet(self) -> subprocess.Popen:
        """Start the kubelet (again); it wipes the device-plugins directory and serves kubelet.sock anew."""
        self.kubelet_starts += 1
        self.kubelet = self.spawn(
            "kubelet",
            [
                str(self.bins["kubelet"]),
                f"--config={self.workdir / 'kubelet.yaml'}",
                f"--kubeconfig={self.workdir / 'kubelet.kubeconfig'}",
                f"--root-dir={self.workdir / 'kubelet'}",
                f"--node-ip={NODE_IP}",
                f"--hostname-override={self.name}",
                "--v=2",
            ],
        )
        return self.kubelet

    def stop_kubelet(self) -> None:
        if self.kubelet is not None:
            stop_process(self.kubelet)
            self.kubelet = None

    def restart_kubelet(self) -> None:
        self.stop_kubelet()
        self.start_kubelet()

    def kubelet_sock_ready(self) -> bool:
        return (self.device_plugins / "kubelet.sock").is_socket()

    # -- the API --------------------------------------------------------------------------

    def get_node(self) -> dict[str, Any]:
        return self.api.request("GET", f"/api/v1/nodes/{self.name}")

    def edit_node(self, edit: Callable[[dict[str, Any]], None], what: str = "the Node's change") -> None:
        """Apply ``edit`` to the Node and write it back, read again and retried on a conflict (the
        kubelet updates its Node every second)."""

        def put() -> bool:
            current = self.get_node()
            edit(current)
            try:
                self.api.request("PUT", f"/api/v1/nodes/{self.name}", current)
            except urllib.error.HTTPError as exc:
                if exc.code == 409:
                    return False
                raise
            return True

        wait_for(f"{what} written", put, 30)

    def allocatable(self, resource: str) -> str | None:
        """The Node's status.allocatable[resource] (None while absent)."""
        try:
            return self.get_node().get("status", {}).get("allocatable", {}).get(resource)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def capacity(self, resource: str) -> str | None:
        try:
            return self.get_node().get("status", {}).get("capacity", {}).get(resource)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def wait_allocatable(self, resource: str, value: str, timeout: float = 60) -> None:
        wait_for(
            f"Node {self.name} allocatable {resource}={value} (now {self.allocatable(resource)!r})",
            lambda: self.allocatable(resource) == value,
            timeout,
        )

    def create_pod(self, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
        return self.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete the pod and wait until the kubelet has finished it and the API has forgotten it."""
        try:
            self.api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0})
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

        def gone() -> bool:
            try:
                self.get_pod(namespace, name)
                return False
            except urllib.error.HTTPError as exc:
                return exc.code == 404

        wait_for(f"pod {namespace}/{name} gone", gone, 60)

    def wait_pod_phase(self, namespace: str, name: str, phases: tuple[str, ...], timeout: float = 90) -> dict[str, Any]:
        """The pod once its phase is one of ``phases``; on timeout the error shows its status and the kubelet's view."""
        pod: dict[str, Any] = {}

        def reached() -> bool:
            nonlocal pod
            pod = self.get_pod(namespace, name)
            return pod.get("status", {}).get("phase") in phases

        try:
            wait_for(f"pod {namespace}/{name} in {phases}", reached, timeout)
        except TimeoutError as exc:
            raise TimeoutError(
                f"{exc}\nstatus: {json.dumps(pod.get('status'))}\nkubelet: {self.log('kubelet')[-3000:]}"
            ) from None
        return pod

    def pod_log(self, namespace: str, name: str, container: str) -> str:
        """What the container wrote (stdout and stderr), from the kubelet's /var/log/pods on the node.

        The CRI log format is ``TIMESTAMP STREAM TAG CONTENT`` a line; CONTENT is returned.
        """
        uid = self.get_pod(namespace, name)["metadata"]["uid"]
        logs = sorted((self.root / "var/log/pods" / f"{namespace}_{name}_{uid}" / container).glob("*.log"))
        lines = []
        for path in logs:
            for line in path.read_text(errors="replace").splitlines():
                parts = line.split(" ", 3)
                lines.append(parts[3] if len(parts) == 4 else "")
        return "\n".join(lines)


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds.

    A process started through ``nsenter --pid`` is nsenter's child (nsenter forks to enter the PID
    namespace and does not pass signals on): the signal goes to that child, and nsenter exits as
    it does.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        target = _child_of(proc.pid) if Path(str(proc.args[0])).name == "nsenter" else None
        with suppress(ProcessLookupError):
            os.kill(target or proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    proc.wait()


def busybox_pod(name: str, script: str, resources: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A one-container busybox pod on the host network that runs ``script`` with sh, never restarted."""
    container: dict[str, Any] = {
        "name": "main",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", script],
    }
    if resources:
        container["resources"] = {"limits": resources}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "hostNetwork": True,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "tolerations": POD_TOLERATIONS,
            "containers": [container],
            **spec,
        },
    }


def _containerd_config(workdir: Path, bins: dict[str, Path]) -> str:
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""version = 3
root = "{workdir / "containerd"}"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[{runtime}]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  restrict_oom_score_adj = {str(needs_restricted_oom_score_adj()).lower()}
  [{runtime}.containerd]
    default_runtime_name = "runc"
    [{runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{runtime}.containerd.runtimes.runc.options]
        BinaryName = "{bins["runc"]}"
        SystemdCgroup = false
  [{runtime}.cni]
    bin_dirs = ["{workdir / "cni/bin"}"]
    conf_dir = "{workdir / "cni/net.d"}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
"""


def _kubelet_config(cgroup_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{cgroup_name}",
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "failSwapOn": False,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "readOnlyPort": 0,
        "nodeStatusUpdateFrequency": "1s",
        "syncFrequency": "10s",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1Mi",
            "imagefs.available": "1Mi",
            "nodefs.inodesFree": "1",
            "imagefs.inodesFree": "1",
        },
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
    }


#: Paths the node writes that must appear only in its own mount namespace.
NODE_PRIVATE_PATHS = ("/run/containerd", "/run/runc", "/var/lib/kubelet", "/var/log/pods", "/var/log/containers")


def leftovers(cgroup_name: str, mnt_ns: str | None, mounts_before: set[str], paths_before: set[str]) -> list[str]:
    """What a stopped node left behind: processes in its namespace, mounts on the machine, cgroups."""
    found = []
    if mnt_ns is not None:
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if os.readlink(proc / "ns/mnt") == mnt_ns:
                    found.append(f"process {proc.name} ({(proc / 'comm').read_text().strip()}) in the node's namespace")
            except OSError:
                continue
    for line in set(Path("/proc/self/mountinfo").read_text().splitlines()) - mounts_before:
        found.append(f"mount on the machine: {line}")
    for hierarchy in cgroup_hierarchies():
        if (hierarchy / cgroup_name).exists():
            found.append(f"cgroup {hierarchy / cgroup_name}")
    for path in NODE_PRIVATE_PATHS:
        if Path(path).exists() and path not in paths_before:
            found.append(f"path on the machine (made outside the node's namespace): {path}")
    return found


def _mountinfo_keys() -> set[str]:
    return set(Path("/proc/self/mountinfo").read_text().splitlines())


@contextmanager
def real_node(workdir: Path) -> Iterator[RealNode]:
    """The control plane and a Ready-to-use node (kubelet registered, images imported) under ``workdir``."""
    bins = {
        name: peer_or_skip(name)
        for name in ("kubelet", "kube-scheduler", "containerd", "ctr", "containerd-shim-runc-v2")
    }
    images = [peer_or_skip(name) for name in ("pause.oci.tar", "busybox.oci.tar")]
    for tool in ("runc", "nsenter", "unshare", "ip"):
        found = shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")
        if found is None:
            raise RuntimeError(f"the real node needs {tool} (scripts/setup --test installs runc)")
        bins[tool] = Path(found)
    if os.geteuid() != 0:
        import pytest

        pytest.skip("the real node needs root (namespaces, mounts, cgroups)")
    workdir.mkdir(parents=True, exist_ok=True)
    mounts_before = _mountinfo_keys()
    paths_before = {p for p in NODE_PRIVATE_PATHS if Path(p).exists()}
    cgroup_name = f"gpuchain-node-{os.getpid()}"
    mnt_ns: str | None = None
    with ExitStack() as outer:
        api = outer.enter_context(control_plane(workdir / "control-plane"))
        # The real scheduler, for pods that name no node (the kubelet's extended resources and,
        # for DRA, ResourceClaims are what it reads). On the machine's loopback like the control plane.
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        scheduler_log = (workdir / "logs" / "kube-scheduler.log").open("wb")
        outer.callback(scheduler_log.close)
        scheduler = subprocess.Popen(
            [str(bins["kube-scheduler"]), f"--kubeconfig={api.kubeconfig}", "--leader-elect=false", "--secure-port=0",
             f"--feature-gates={FEATURE_GATES}", "--v=1"],
            stdout=scheduler_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        outer.callback(stop_process, scheduler)
        # cgroup root in every hierarchy (removed last, after every process in it is gone)
        outer.callback(
            lambda: [_remove_cgroup_tree(h / cgroup_name, time.monotonic() + 20) for h in cgroup_hierarchies()]
        )
        for hierarchy in cgroup_hierarchies():
            path = hierarchy / cgroup_name
            path.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (path / knob).write_text((hierarchy / knob).read_text())
        (workdir / "device-plugins").mkdir(exist_ok=True)
        sysctl = workdir / "sysctl"
        sysctl.mkdir(exist_ok=True)
        for name, value in KUBELET_SYSCTLS.items():
            (sysctl / name.replace("/", ".")).write_text(value + "\n")
        (workdir / "init.sh").write_text(_INIT)
        (workdir / "containerd.toml").write_text(_containerd_config(workdir, bins))
        (workdir / "kubelet.yaml").write_text(yaml.safe_dump(_kubelet_config(cgroup_name)))
        for d in ("cni/bin", "cni/net.d", "kubelet", "logs"):
            (workdir / d).mkdir(parents=True, exist_ok=True)
        write_kubeconfig(
            workdir / "kubelet.kubeconfig",
            f"https://127.0.0.1:{API_PORT_IN_NODE}",
            api.ca,
            {
                "client-certificate-data": _b64(api.workdir / "admin.crt"),
                "client-key-data": _b64(api.workdir / "admin.key"),
            },
        )
        init_log = (workdir / "logs" / "init.log").open("wb")
        outer.callback(init_log.close)
        init = subprocess.Popen(
            [str(bins["unshare"]), "--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
             "/bin/sh", str(workdir / "init.sh"), str(workdir), NODE_IP, sys.executable],
            stdout=init_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

        def stop_init() -> None:
            # The init is PID 1 of the node's PID namespace: when it exits the kernel kills every
            # process left in the namespace. unshare (its parent here) passes SIGKILL on (--kill-child).
            init.kill()
            init.wait()

        outer.callback(stop_init)
        wait_for(
            "the node's namespaces",
            lambda: (
                (workdir / "init-ready").exists()
                or (init.poll() is not None and _raise(init, workdir / "logs" / "init.log"))
            ),
            30,
        )
        # unshare forked: the node's init is its child, the one whose namespaces the node lives in
        child = wait_for("the node's init process", lambda: _child_of(init.pid), 10)
        mnt_ns = os.readlink(f"/proc/{child}/ns/mnt")
        node = RealNode(api=api, workdir=workdir, pid=child, bins=bins, cgroup_name=cgroup_name, stack=outer)

        relay = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("netns_relay.py")), f"/proc/{child}/ns/net",
             f"127.0.0.1:{API_PORT_IN_NODE}", api.url.removeprefix("https://")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        outer.callback(stop_process, relay)
        assert relay.stdout is not None
        if relay.stdout.readline().strip() != "ready":
            raise RuntimeError(
                f"the API relay into the node did not start: {relay.stderr.read() if relay.stderr else ''}"
            )

        env = {**os.environ, "PATH": f"{bins['containerd'].parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
        containerd = node.spawn(
            "containerd", [str(bins["containerd"]), f"--config={workdir / 'containerd.toml'}"], env=env
        )
        ctr = [str(bins["ctr"]), "--address=/run/containerd/containerd.sock", "--namespace=k8s.io"]
        wait_for(
            "containerd serving",
            lambda: (
                (
                    containerd.poll() is None
                    and subprocess.run(node.nsenter([*ctr, "version"]), capture_output=True).returncode == 0
                )
                or (containerd.poll() is not None and _raise(containerd, workdir / "logs" / "containerd.log"))
            ),
            60,
        )
        for image in images:
            node.run([*ctr, "images", "import", "--no-unpack=false", str(image)], timeout=120)
        node.start_kubelet()
        wait_for(
            "the kubelet's Node registered",
            lambda: node.kubelet is not None and _alive(node.kubelet, node) and node.allocatable("cpu"),
            120,
        )
        wait_for("the kubelet's device-plugin registration socket", node.kubelet_sock_ready, 60)
        if scheduler.poll() is not None:
            _raise(scheduler, workdir / "logs" / "kube-scheduler.log")
        try:
            yield node
        finally:
            # Stop the node's processes the gentle way first (the kubelet, then containerd), so a
            # failure while stopping shows in their logs; the init's exit then kills the rest.
            node.stop_kubelet()
            stop_process(containerd)
            stop_init()
            wait_for("the node's processes gone", lambda: not _in_namespace(mnt_ns), 30)
    left = leftovers(cgroup_name, mnt_ns, mounts_before, paths_before)
    if left:
        raise RuntimeError("the real node left things behind:\n" + "\n".join(left))


def _raise(proc: subprocess.Popen, log: Path) -> bool:
    raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}")


def _alive(proc: subprocess.Popen, node: RealNode) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"the kubelet exited with {proc.returncode}:\n{node.log('kubelet')[-4000:]}")
    return True


def _child_of(pid: int) -> int | None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _in_namespace(mnt_ns: str | None) -> bool:
    if mnt_ns is None:
        return False
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.readlink(proc / "ns/mnt") == mnt_ns:
                    return True
            except OSError:
                continue
    return False
