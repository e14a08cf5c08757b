"""The repair of an error line the catalog does not know, from the line's shape and the object it names.

A line no catalog entry knows is still written in the words of the layer that failed under the component: the
kernel's module loader through kmod ("Module nouveau is in use"), POSIX errno texts as Go and glibc print them
("stat /usr/bin/nvidia-container-runtime: no such file or directory", "bind: address already in use"), Kubernetes'
drain helper ("evicting pod ns/name"), the flag and config parsers the components use ("unknown flag: --x"). Each
such shape says what kind of failure it is and names its object (a module, a path, a socket, a port, a pod, a flag),
and what repairs that kind of failure for that object follows from the layer's own semantics, not from a report:
a module held in use is released by its holders, a file missing is put back by the package or mount that provides
it, a socket that refuses has no daemon behind it. `shaped` answers that repair, or None where no shape fits (then
the link's general next step stays the whole answer, `next_steps.next_step`).

The finding stays log.unrecognised and its link stays the one the walk named: a shape chooses the fix, never the
link (a line about a missing path is not the toolkit's fault because the path is the toolkit's).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context
from gpuchain.doctor.hostpath_kernel import KERNEL_SOURCE, kernel_source_missing


@dataclass(frozen=True)
class Shaped:
    """An unknown line read by its shape: what kind of failure it is, the object it names, and what repairs it."""

    shape: str  #: the kind of failure ("kernel module in use")
    named: str  #: the object the line names (a module, path, socket, port, pod, flag)
    action: str  #: the repair of that shape for that object on the failing link, with the exact key or command

    @property
    def what(self) -> str:
        """The shape and its object, as a fix quotes them."""
        return f"{self.shape} ({self.named})"


def _operator_driver(ctx: Context) -> bool:
    """Does the operator's driver container install the driver here (its ClusterPolicy deploys the driver)?"""
    return ctx.policy_obj is not None and ctx.policy.driver.enabled


def _driver_reinstall(ctx: Context) -> str:
    """How the driver's kernel modules are installed again on this stack: the stack's own installer where it
    manages the driver (a managed cloud), the operator's driver pod doing its full install where the ClusterPolicy
    deploys the driver, else the host's driver rebuilt for the running kernel."""
    if ctx.stack.driver_install:
        return ctx.stack.driver_install
    if _operator_driver(ctx):
        # gpu-driver-container's nvidia-driver skips the kernel modules when the loaded module already has the
        # configuration it wants (its "userspace-only install"); FORCE_REINSTALL=true makes it install them all
        # (kmod.peermem-module-missing in catalog.yaml).
        return (
            "make the driver pod do its full module install: set FORCE_REINSTALL=true in spec.driver.env of "
            f"{ctx.policy_ref}, then delete the driver pod on the node so it installs again; or reboot the node"
        )
    return (
        "reinstall the node's NVIDIA driver for its running kernel (the distribution's packages, or dkms autoinstall "
        "-k $(uname -r) where DKMS builds it), and reboot"
    )


def _reload(ctx: Context) -> str:
    """How the NVIDIA modules are unloaded and loaded again once nothing holds them: the operator's driver pod does
    it as it starts; a host driver by hand (the nvml.version-mismatch entry's order, dependants first)."""
    if _operator_driver(ctx):
        return "delete the driver pod on the node so it unloads and loads them again"
    return "reload them (modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia)"


def _drain(node: str) -> str:
    """The command that takes the node's GPU pods off it (kubectl drain; DaemonSets stay)."""
    node = node or "<node>"
    return f"kubectl cordon {node} && kubectl drain {node} --ignore-daemonsets --delete-emptydir-data"


# -- kernel modules (kmod-project/kmod tools/rmmod.c@v30 "Module %s is in use", "Module %s is in use by:", "could not
# remove module %s: %s"; tools/modprobe.c@v30 "Module %s is in use.", "Module %s not found in directory %s",
# "could not insert '%s': %s", with ENOENT printed as "Unknown symbol in module, or unknown parameter (see dmesg)").

#: The catalog entry whose fix keeps nouveau off the GPUs (blacklist, initramfs, reboot).
NOUVEAU = "nvidia-installer.nouveau-in-use"


def _module_in_use(ctx: Context, link: str, m: re.Match[str], node: str) -> str:
    """A module the kernel will not unload while its reference count is not zero: nouveau is kept from loading at
    boot (it holds the GPUs the NVIDIA module needs), an NVIDIA module is released by the processes and modules that
    use the GPUs, any other by the modules that hold it."""
    module = m["module"] or m["module2"]
    if module == "nouveau":
        return catalog.entry(NOUVEAU).fix
    if module.startswith("nvidia"):
        return (
            f"release {module} from what holds the GPUs: {_drain(node)} (the GPU pods), stop the host's own GPU "
            "services (systemctl stop nvidia-persistenced nvidia-fabricmanager nvidia-dcgm; lsof /dev/nvidia* lists "
            f"what still holds them), then {_reload(ctx)}; or reboot the node"
        )
    return (
        f"release {module}: lsmod | grep {module} names the modules that use it (unload them first, modprobe -r "
        "them), lsof the processes; or reboot the node"
    )


def _module_missing(ctx: Context, link: str, m: re.Match[str], node: str) -> str:
    """modprobe found no file of the module for the running kernel: the driver's modules were not built or not
    installed for it (a kernel update, a fast-path install that installs no modules)."""
    module = m["module"]
    if not module.startswith("nvidia"):
        return (
            f"{module} is not installed for the running kernel: install the kernel package that carries it for "
            "$(uname -r) on the node (linux-modules-extra-$(uname -r) on Ubuntu), or load the driver stack that builds "
            "it (MOFED for the InfiniBand modules) before this pod starts"
        )
    return f"the driver's {module} module is not installed for the running kernel: {_driver_reinstall(ctx)}"


#: The errno texts of a module load that say the module was built against something other than what runs now
#: (the kernel answers EINVAL for a symbol whose CRC disagrees with the loaded module that exports it, ENOEXEC for
#: another kernel's module format, ENOENT for a symbol no loaded module exports).
REBUILT = re.compile(r"Invalid argument|Unknown symbol|Invalid module format|Exec format error", re.IGNORECASE)
#: The errno texts of a module load the kernel refuses for its signature: EKEYREJECTED, ENOKEY, and EPERM from
#: lockdown (torvalds/linux kernel/module/signing.c@v6.6 returns security_locked_down(LOCKDOWN_MODULE_SIGNATURE)
#: for a module no trusted key signed, which UEFI Secure Boot turns on).
UNSIGNED = re.compile(r"Key was rejected by service|Required key not available|Operation not permitted", re.I)
#: The catalog entry whose fix is Secure Boot off or the module signed with an enrolled key.
SECURE_BOOT = "nvidia-installer.load-no-key"


def _module_insert(ctx: Context, link: str, m: re.Match[str], node: str) -> str | None:
    """The kernel refused the module as built: it was built against another kernel, or another build of a module
    it uses (ib_core of MOFED for nvidia_peermem), so it is rebuilt against what is loaded now; or its signature is
    not one the kernel trusts (Secure Boot). Other refusals (SELinux's EACCES, no device) are the catalog's or
    another shape's."""
    module, why = m["module"], m["why"]
    if UNSIGNED.search(why):
        return catalog.entry(SECURE_BOOT).fix
    if not REBUILT.search(why):
        return None
    peer = (
        " (nvidia_peermem is built against the InfiniBand core loaded when the driver pod started: after a MOFED "
        "change it must be built again)"
        if "peermem" in module
        else ""
    )
    return (
        f"rebuild {module} against the kernel and modules loaded now{peer}: {_drain(node)} (the GPU pods), then "
        f"{_driver_reinstall(ctx)}"
    )


# -- paths (POSIX ENOENT as Go's os and os/exec print it, "stat %s: no such file or directory", "fork/exec %s: ...",
# glibc's dynamic loader "error while loading shared libraries: %s: cannot open shared object file", dlopen's
# "%s: cannot open shared object file: No such file or directory").


@dataclass(frozen=True)
class Provider:
    """What puts a path on a node: the package or mount whose absence the path's absence shows."""

    pattern: re.Pattern[str]  #: the path (or its file name) it provides
    action: str  #: how to put it back ({path} is the path the line names)


#: The providers of the chain's files, with where each fact is from.
PROVIDERS = (
    # nvidia-container-toolkit packaging/rpm/SPECS/nvidia-container-toolkit.spec@v1.17.4: "%files base" holds
    # nvidia-container-runtime (and its .cdi/.legacy modes), nvidia-ctk and nvidia-cdi-hook; the main package the
    # nvidia-container-runtime-hook.
    Provider(
        re.compile(r"(^|/)(nvidia-container-runtime(\.cdi|\.legacy)?|nvidia-ctk|nvidia-cdi-hook)$"),
        "{path} is missing on the node: install the toolkit's base package there (apt-get, dnf or tdnf install "
        "nvidia-container-toolkit-base nvidia-container-toolkit), or point the runtime's BinaryName (containerd "
        "config) or the toolkit's install dir at where the binary is; then restart the container runtime",
    ),
    Provider(
        re.compile(r"(^|/)nvidia-container-(runtime-hook|toolkit)$"),
        "{path} is missing on the node: install the nvidia-container-toolkit package there (apt-get, dnf or tdnf "
        "install nvidia-container-toolkit), or point the hook's path in the runtime config at where it is",
    ),
    # NVIDIA/libnvidia-container pkg/rpm/SPECS/libnvidia-container.spec@v1.17.4: libnvidia-container-tools holds
    # nvidia-container-cli, libnvidia-container1 the library.
    Provider(
        re.compile(r"(^|/)(nvidia-container-cli|libnvidia-container(-go)?\.so[.\d]*)$"),
        "{path} is missing on the node: install libnvidia-container-tools and libnvidia-container1 there (the "
        "toolkit's packages), at the release of the nvidia-container-toolkit installed beside them",
    ),
    # Before the driver's user-space: a path under the driver root is missing because the root is. The GPU
    # Operator's driver container mounts its root at /run/nvidia/driver (NVIDIA/gpu-driver-container
    # ubuntu22.04/nvidia-driver@25.01.21 _mount_rootfs); a driver pod that ended without its cleanup leaves the
    # mount point stale for the next one.
    Provider(
        re.compile(r"^/run/nvidia/driver(/|$)"),
        "{path} is under the driver container's root, which is mounted at /run/nvidia/driver only while a driver "
        "pod runs: on the node, findmnt /run/nvidia/driver; where no driver pod is Running there, unmount the stale "
        "mount (umount -l /run/nvidia/driver) and delete the driver pod so it installs and mounts it again",
    ),
    # The driver's user-space: NVML and nvidia-smi ship with the driver (its .run installer or the distribution's
    # packages), and the toolkit finds them under its driver root (NVIDIA/nvidia-container-toolkit
    # internal/config/config.go@v1.17.4 nvidia-container-cli.root; the GPU Operator mounts its driver container's
    # root at /run/nvidia/driver). The .so.1 names are the SONAME links ldconfig creates beside the versioned files.
    Provider(
        re.compile(r"(^|/)(libnvidia-ml\.so[.\d]*|libcuda\.so[.\d]*|nvidia-smi|nvidia-persistenced)$"),
        "{path} (the driver's user-space) is not where it is looked for: with the driver on the host, install its "
        "user-space libraries with it (the same driver release's packages, e.g. libnvidia-compute-<branch> and "
        "nvidia-utils-<branch> on Ubuntu), and where the versioned file (.so.<driver version>) is there but not "
        "{path}, its library links are missing: run ldconfig on the host, which creates them; with the operator's "
        "driver, its pod must be Running so /run/nvidia/driver holds them; and the toolkit's driver root (root in "
        "/etc/nvidia-container-runtime/config.toml, the "
        "operator's driver root) must name where they are",
    ),
    # The toolkit's library locator reads the dynamic linker's cache under its driver root to find the driver's
    # libraries (NVIDIA/nvidia-container-toolkit internal/lookup/library.go@v1.14.0 "error loading ldcache: %v"
    # around ldcache.New(logger, root)); ldconfig writes that cache, which an OS without ldconfig runs never has.
    Provider(
        re.compile(r"(^|/)etc/ld\.so\.cache$"),
        "{path} is the dynamic linker's cache, which the NVIDIA runtime reads under its driver root to find the "
        "driver's libraries: run ldconfig there (on the host for a host driver) so it exists; on an OS that keeps "
        "none (Talos), move to the OS release or NVIDIA toolkit extension whose runtime finds the libraries without "
        "it, or leave the capabilities that need the lookup (graphics, display) out of NVIDIA_DRIVER_CAPABILITIES",
    ),
    # kubernetes/kubelet pkg/apis/deviceplugin/v1beta1/constants.go@v0.33.0: DevicePluginPath
    # "/var/lib/kubelet/device-plugins/", KubeletSocket under it; the kubelet creates it under its --root-dir.
    Provider(
        re.compile(r"^/var/lib/kubelet/device-plugins(/|$)"),
        "{path} is the kubelet's device plugin directory, which the plugin's pod mounts from the host: the kubelet "
        "on this node keeps it under its own --root-dir (k0s /var/lib/k0s/kubelet, MicroK8s "
        "/var/snap/microk8s/common/var/lib/kubelet): point the DaemonSet's hostPath for it at "
        "<root-dir>/device-plugins, mounted at /var/lib/kubelet/device-plugins",
    ),
    # The NVIDIA device files appear when the module loads or nvidia-modprobe / nvidia-ctk creates them
    # (NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk/system/create-device-nodes@v1.17.4).
    Provider(
        re.compile(r"^/dev/nvidia"),
        "{path} does not exist: the NVIDIA module is not loaded or its device files were not created; with the "
        "driver loaded (lsmod | grep nvidia), create them on the node: nvidia-ctk system create-device-nodes "
        "--control-devices --load-kernel-modules",
    ),
)

#: A path a POSIX ENOENT names, in the ways Go, glibc, the shell and nvidia-installer print one (bash's "%s: command
#: not found", dash's "%s: not found", NVIDIA/nvidia-installer common-utils/common-utils.c@f670484e "Failure
#: creating directory '%s' : (%s)").
MISSING_PATH = re.compile(
    r"(?:stat|open|lstat|fork/exec|exec:?|chdir|mkdir|readlink|mount)\s+\"?(?P<path>/[^\s\"':]+)\"?:\s*no such file"
    r"|\"?(?P<path2>/[^\s\"':]+)\"?:\s*(?:no such file or directory|not found)"
    r"|(?:loading shared libraries|could not load|failed to load|dlopen)\W+(?P<lib>[\w.+-]+\.so[.\d]*)"
    r"|(?P<lib2>lib[\w.+-]+\.so[.\d]*): cannot open shared object file"
    r"|exec: \\?\"(?P<exe>[\w.-]+)\\?\": executable file not found in \$PATH"
    r"|(?P<exe2>[\w.-]+): (?:command )?not found"
    r"|Failure creating directory '(?P<dir>/[^']+)' ?: \(No such file",
    re.IGNORECASE,
)


def _missing(ctx: Context, link: str, m: re.Match[str], node: str) -> str | None:
    """A file or directory that is not there, repaired by what provides it; None for a path no provider of the
    chain is known for (a path the line names is not enough to say who should have made it)."""
    path = next(m[g] for g in ("path", "path2", "lib", "lib2", "exe", "exe2", "dir") if m[g])
    provider = next((p for p in PROVIDERS if p.pattern.search(path)), None)
    if provider is not None:
        return provider.action.format(path=path)
    return _dependency(path, m.string) if m["lib"] or m["lib2"] else None


#: The program glibc's loader names before a library it cannot load ("%s: error while loading shared libraries:").
LOADING = re.compile(r"(?P<program>[\w./+-]+): error while loading shared libraries")


def _dependency(library: str, line: str) -> str:
    """A library no file of the chain provides, which a program of the chain links against: the program was built
    for a system that has it (its package depends on the library's), so the node needs that library's package, or
    a build of the program made for this node's OS; an immutable OS ships both only in its own extension or image."""
    found = LOADING.search(line)
    program = found["program"] if found else "the program that loads it"
    return (
        f"{program} cannot start: {library}, a library it links against, is not on the node; install the "
        f"distribution's package that provides {library} (dnf provides '*/{library}', apt-file search {library}) "
        f"or the build of {program}'s package made for this node's OS; on an immutable OS (Talos, Bottlerocket, "
        "Flatcar) move to the OS release or system extension whose NVIDIA toolkit ships it"
    )


# -- permissions (POSIX EACCES "permission denied", EPERM "operation not permitted"; NVML's
# NVML_ERROR_NO_PERMISSION "Insufficient Permissions", NVIDIA/go-nvml pkg/nvml/nvml.h@v0.12.4-1).

PERMISSION = re.compile(
    r"(?:(?P<path>/[^\s\"':]+)\"?:\s*(?:connect:\s*)?)?"
    r"(?P<why>permission denied|operation not permitted|insufficient permissions)",
    re.IGNORECASE,
)


def _permission(ctx: Context, link: str, m: re.Match[str], node: str) -> str | None:
    """The container may not open what it needs: MIG device handles need the MIG monitor capability, which the
    NVIDIA runtime mounts only for NVIDIA_MIG_MONITOR_DEVICES=all (NVIDIA/k8s-device-plugin
    deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml@004ef6b sets it for any MIG strategy
    but none, with the chart's securityContext, which adds SYS_ADMIN); a host path or device needs a privileged
    container."""
    line, path = m.string, m["path"] or ""
    if re.search(r"\bMIG\b|nvidia-caps|/capabilities/mig", line, re.IGNORECASE):
        return (
            "give the container the MIG monitor capability: set NVIDIA_MIG_MONITOR_DEVICES=all in its env (kubectl -n "
            f"{ctx.namespace} set env daemonset/<its DaemonSet> NVIDIA_MIG_MONITOR_DEVICES=all, or the chart's "
            "migStrategy other than none, which sets it) and add SYS_ADMIN to its securityContext.capabilities"
        )
    if not path:
        return None
    return (
        f"the container may not use {path}: run it privileged (securityContext.privileged: true in its DaemonSet) or "
        "with the capability the operation needs; on an SELinux node, check the denial (ausearch -m avc) and "
        "relabel or allow it"
    )


# -- read-only file systems (POSIX EROFS "read-only file system").


def _read_only(ctx: Context, link: str, m: re.Match[str], node: str) -> str:
    """A write refused because the file system is mounted read-only: an immutable OS (Talos, Flatcar, Bottlerocket,
    Fedora CoreOS) whose /usr and /lib are its image's. Its own way of shipping the driver and toolkit (system
    extensions, a variant) replaces the operator's (spec.driver.enabled, spec.toolkit.enabled off), or the toolkit
    installs into a directory the OS lets it write (spec.toolkit.installDir, /usr/local/nvidia by default)."""
    path = m["path"] or "the path"
    policy = f" in {ctx.policy_ref}" if ctx.policy_obj is not None else ""
    off = (
        f"turn the operator's own off (spec.driver.enabled=false and spec.toolkit.enabled=false{policy})"
        if ctx.policy_obj is not None
        else "remove the chart's own install of them"
    )
    where = (
        f"; or install the toolkit into a writable directory (spec.toolkit.installDir{policy}, e.g. /var/lib/nvidia)"
        if link == "toolkit"
        else ""
        if link == "driver"
        else "; or mount a writable directory there (an emptyDir, or a hostPath the OS lets pods write)"
    )
    return (
        f"{path} is on a read-only file system (an immutable OS's image): install the NVIDIA driver and toolkit the "
        "OS's own way (Talos: the nonfree-kmod-nvidia and nvidia-container-toolkit system extensions; Bottlerocket: "
        f"its nvidia variant) and {off}{where}"
    )


# -- unix and TCP sockets (POSIX ECONNREFUSED "connection refused", ENOENT on a socket path, as Go's net package
# prints them: "dial unix %s: connect: %s", "dial tcp %s: connect: %s").


@dataclass(frozen=True)
class Daemon:
    """The daemon behind a socket: what serves it and how it is brought back."""

    pattern: re.Pattern[str]
    action: str  #: ({socket} is the socket the line names, {node} the failing pod's node)


DAEMONS = (
    # containerd's default address (containerd/containerd defaults/defaults_unix.go@v1.7.0 /run/containerd/
    # containerd.sock); k3s and RKE2 run their own at /run/k3s/containerd/containerd.sock.
    Daemon(
        re.compile(r"containerd\.sock"),
        "containerd does not answer at {socket}: start it on the node (systemctl status containerd; restart it), or, "
        "where this node's containerd listens elsewhere (k3s and RKE2: /run/k3s/containerd/containerd.sock), set "
        "CONTAINERD_SOCKET in the toolkit's env to that socket",
    ),
    Daemon(
        re.compile(r"crio\.sock"),
        "CRI-O does not answer at {socket}: start it on the node (systemctl status crio)",
    ),
    Daemon(
        re.compile(r"docker\.sock"),
        "dockerd does not answer at {socket}: start it on the node (systemctl status docker)",
    ),
    # kubernetes/kubelet pkg/apis/deviceplugin/v1beta1/constants.go@v0.33.0 KubeletSocket.
    Daemon(
        re.compile(r"kubelet\.sock"),
        "the kubelet does not answer at {socket}: check it runs on the node (systemctl status kubelet) and that the "
        "pod mounts the kubelet's own device plugin directory (under its --root-dir)",
    ),
    # NVIDIA/k8s-device-plugin cmd/mps-control-daemon@v0.17.0: the MPS control daemon the plugin's MPS sharing
    # needs runs as its own DaemonSet, on nodes labelled nvidia.com/mps.capable=true.
    Daemon(
        re.compile(r"nvidia-mps|/mps/"),
        "the MPS control daemon does not answer at {socket}: run the device plugin's mps-control-daemon on the node "
        "(its DaemonSet schedules on nvidia.com/mps.capable=true, which the plugin sets for an MPS sharing config)",
    ),
    Daemon(
        re.compile(r"nvidia-persistenced"),
        "nvidia-persistenced does not answer at {socket}: start it on the node (systemctl start nvidia-persistenced) "
        "or let the driver pod, which runs it, become ready",
    ),
    # NVIDIA/DCGM's nv-hostengine listens on port 5555 (dcgm_structs.h DCGM_HE_PORT_NUMBER); dcgm-exporter
    # connects to it with -r / DCGM_REMOTE_HOSTENGINE_INFO (NVIDIA/dcgm-exporter pkg/cmd/app.go@4.1.1-4.0.4).
    # The API server, as a pod reaches it: the kubernetes Service's port 443 (its ClusterIP, the first of the
    # service range), or kube-apiserver's --secure-port, 6443 by default (kubernetes/kubernetes
    # cmd/kube-apiserver/app/options@v1.33.0).
    Daemon(
        re.compile(r":(443|6443)$"),
        "the pod does not reach the Kubernetes API server at {socket}: check the node's network (its kube-proxy and "
        "CNI pods Running: kubectl get pods -A -o wide --field-selector spec.nodeName={node}) and the API server; "
        "then delete the pod",
    ),
    Daemon(
        re.compile(r":5555$"),
        "no DCGM host engine listens at {socket}: run it (the operator's nvidia-dcgm, spec.dcgm.enabled=true, or "
        "nv-hostengine on the host), or let dcgm-exporter embed its own by removing DCGM_REMOTE_HOSTENGINE_INFO "
        "(-r) from its env",
    ),
)

SOCKET = re.compile(
    r"dial (?:unix|tcp) \"?(?P<socket>[^\s\"]+?)\"?: "
    r"(?:connect: (?P<why>connection refused|no such file or directory)|i/o timeout)",
    re.IGNORECASE,
)


def _socket(ctx: Context, link: str, m: re.Match[str], node: str) -> str:
    """Nothing listens where the client dials: the daemon behind that socket is not running (or listens
    elsewhere), and is started, or the client is pointed at where it listens."""
    sock = m["socket"]
    daemon = next((d for d in DAEMONS if d.pattern.search(sock)), None)
    if daemon is not None:
        return daemon.action.format(socket=sock, node=node or "<node>")
    return f"nothing serves {sock}: start the daemon that owns it on the node, or point the client at where it listens"


# -- ports (POSIX EADDRINUSE, Go's "listen tcp %s: bind: address already in use").

PORT = re.compile(r"listen (?:tcp|udp)\d? (?P<addr>\S*?):(?P<port>\d+): bind: address already in use", re.IGNORECASE)


def _port(ctx: Context, link: str, m: re.Match[str], node: str) -> str:
    """Another process on the node holds the port (a pod on the host network cannot share it): a second copy of the
    same component (two charts' exporters) or another program. dcgm-exporter's address is --address /
    DCGM_EXPORTER_LISTEN (NVIDIA/dcgm-exporter pkg/cmd/app.go@4.1.1-4.0.4, default :9400)."""
    port = m["port"]
    move = (
        f'move this exporter to a free port (DCGM_EXPORTER_LISTEN=":{int(port) + 1}" in its env, and its Service '
        "and scrape config with it)"
        if link == "exporter"
        else "move this one to a free port (its listen address argument, and its Service with it)"
    )
    return (
        f"another process on the node holds port {port}: find it (ss -ltnp 'sport = :{port}' on the node); where it "
        f"is a second copy of this component (another chart's or the host's), remove that copy; otherwise {move}"
    )


# -- arguments and config of another release (spf13/pflag flag.go@v1.0.5 "unknown flag: --%s", "unknown shorthand
# flag: %q in -%s"; golang/go src/flag/flag.go@go1.22.0 "flag provided but not defined: -%s"; src/encoding/json/
# decode.go@go1.22.0 `json: unknown field %q`; go-yaml v2 strict "field %s not found in type %s").

FLAG = re.compile(
    r"unknown (?:shorthand )?flag: (?P<flag>'?-{0,2}[\w.-]+'?)|flag provided but not defined: (?P<flag2>-{1,2}[\w.-]+)"
    r"|unknown field \"?(?P<field>[\w.-]+)\"?|field (?P<field2>[\w.-]+) not found in type",
    re.IGNORECASE,
)

#: The ClusterPolicy key of each link's operand, whose version pin keeps an image of another release.
SPEC_KEYS = {
    "driver": "driver",
    "toolkit": "toolkit",
    "device-plugin": "devicePlugin",
    "gfd": "gfd",
    "exporter": "dcgmExporter",
    "mig": "migManager",
}


def _release_skew(ctx: Context, link: str, m: re.Match[str], node: str) -> str:
    """The binary does not define an argument or config key it is given: the image is another release than the
    chart, operator or config that wrote them, so the two are set from one release."""
    name = next(m[g] for g in ("flag", "flag2", "field", "field2") if m[g])
    key = SPEC_KEYS.get(link)
    pinned = (
        f"drop the version pinned for it (spec.{key}.version in {ctx.policy_ref}) so the operator's own release of "
        "it runs, or pin one the operator renders these arguments for; "
        if ctx.policy_obj is not None and key
        else ""
    )
    return (
        f"{name} is from another release than the binary that refuses it: {pinned}set the image and its arguments "
        "and config from one release (the image tag of the chart version that renders them, helm upgrade with that "
        "chart), or remove the setting the running release does not know"
    )


# -- drains (kubernetes/kubectl pkg/drain/drain.go@v0.33.0 "evicting pod %s/%s", "error when evicting pods/%q -n %q",
# "error when waiting for pod %q in namespace %q to terminate").

DRAIN = re.compile(
    r"evicting pod (?P<ns>[\w.-]+)/(?P<name>[\w.-]+)"
    r"|error when evicting pods/\"(?P<name2>[\w.-]+)\" -n \"(?P<ns2>[\w.-]+)\""
    r"|waiting for pod \"(?P<name3>[\w.-]+)\" in namespace \"(?P<ns3>[\w.-]+)\"",
    re.IGNORECASE,
)


def _drain_waits(ctx: Context, link: str, m: re.Match[str], node: str) -> str:
    """A drain that waits on one pod: a PodDisruptionBudget that allows no disruption keeps it (the API answers 429
    and the drain retries), or it is terminating and does not end (a finalizer, a process that ignores SIGTERM)."""
    ns = m["ns"] or m["ns2"] or m["ns3"]
    name = m["name"] or m["name2"] or m["name3"]
    return (
        f"the drain waits on pod {ns}/{name}: where a PodDisruptionBudget keeps it (kubectl -n {ns} get pdb), raise "
        f"its maxUnavailable or delete the pod (kubectl -n {ns} delete pod {name}); where it is already Terminating, "
        f"kubectl -n {ns} delete pod {name} --force --grace-period=0"
    )


# -- resources of the node (POSIX ENOSPC "no space left on device", EMFILE "too many open files", ENOMEM "cannot
# allocate memory"; inotify(7): inotify_add_watch answers ENOSPC at fs.inotify.max_user_watches and inotify_init
# EMFILE at fs.inotify.max_user_instances).

INOTIFY = re.compile(r"(inotify|fsnotify|watch\w*)\b.*(?P<why>no space left on device|too many open files)", re.I)
NO_SPACE = re.compile(r"(?:(?P<path>/[^\s\"':]+)\"?:\s*)?no space left on device", re.IGNORECASE)
NO_MEMORY = re.compile(r"cannot allocate memory", re.IGNORECASE)


def _inotify(ctx: Context, link: str, m: re.Match[str], node: str) -> str:
    """The node's inotify limits are reached (not its disk): they are raised with sysctl."""
    key = "max_user_watches" if "space" in m["why"].lower() else "max_user_instances"
    return (
        f"the node's inotify limit is reached: raise fs.inotify.{key} (sysctl -w fs.inotify.{key}=524288 on the node, "
        "and in /etc/sysctl.d/ so it stays), then delete the pod"
    )


def _no_space(ctx: Context, link: str, m: re.Match[str], node: str) -> str:
    """The file system the write goes to is full."""
    path = m["path"] or "the path it writes"
    return (
        f"the file system holding {path} is full: on the node, df -h {m['path'] or '/'} names it; free space (crictl "
        "rmi --prune for unused images, old logs) or grow the disk"
    )


def _no_memory(ctx: Context, link: str, m: re.Match[str], node: str) -> str:
    """The kernel could not allocate what was asked (a container's memory limit shows as OOMKilled instead): the
    node is short of memory, or a module load finds its memory fragmented after a long uptime."""
    return (
        f"the node's kernel is out of memory for this: free -m and the pods on the node show what uses it; "
        f"{_drain(node)} and reboot the node where it stays"
    )


# -- packages the driver container installs (Debian/apt apt-pkg/cacheset.cc "Unable to locate package %s",
# apt-pkg/depcache "Package '%s' has no installation candidate", apt-pkg/acquire-item.cc "Failed to fetch %s",
# methods/connect.cc "Temporary failure resolving '%s'"; rpm-software-management/yum cli.py "No package %s
# available."; dnf "No match for argument: %s", libdnf "Failed to download metadata for repo '%s'"; openSUSE/zypper
# "No provider of '%s' found."; curl "Could not resolve host: %s"). The GPU Operator's driver container installs the
# kernel's headers (and, precompiled, NVIDIA's module packages) at start; spec.driver.repoConfig.configMapName names
# the repository files it reads, spec.driver.env its proxy (NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go
# @608002e DriverSpec RepoConfig, Env, UsePrecompiled).

PACKAGE = re.compile(
    r"No package (?P<pkg>\S+) available|No match for argument: (?P<pkg2>\S+)|Unable to locate package (?P<pkg3>\S+)"
    r"|Package '(?P<pkg4>[^']+)' has no installation candidate|No provider of '(?P<pkg5>[^']+)' found",
    re.IGNORECASE,
)
REPOSITORY = re.compile(
    r"Failed to download metadata for repo '(?P<repo>[^']+)'|Cannot retrieve repository metadata"
    r"|Failed to fetch (?P<url>\S+)|Temporary failure resolving '(?P<host>[^']+)'"
    r"|Could not resolve host:? (?P<host2>\S+)",
    re.IGNORECASE,
)
#: The packages of one kernel build, whose name carries its version.
KERNEL_PACKAGE = re.compile(r"^(kernel|linux)-(devel|headers|image|modules|objects|signatures|core)\b|-\d+\.\d+\.\d+-")


def _operator_builds(ctx: Context, link: str) -> bool:
    """Does the operator's driver container install packages on this node (the only operand that does)?"""
    return link == "driver" and _operator_driver(ctx)


def _package(ctx: Context, link: str, m: re.Match[str], node: str) -> str | None:
    """A package the driver container asks for is in none of the repositories it reads: a kernel package of a
    kernel they do not publish (custom, withdrawn, newer than the repositories), or a repository that is not
    enabled (RHEL's without entitlement)."""
    if not _operator_builds(ctx, link):
        return None
    pkg = next(m[g] for g in ("pkg", "pkg2", "pkg3", "pkg4", "pkg5") if m[g])
    precompiled = f"or use a precompiled driver (spec.driver.usePrecompiled=true in {ctx.policy_ref})"
    if KERNEL_PACKAGE.search(pkg):
        return (
            f"the repositories the driver container reads publish no {pkg} for this node's kernel: run the node on a "
            "kernel they publish (its image's or the distribution's current one), point the container at a "
            f"repository that has it (spec.driver.repoConfig.configMapName in {ctx.policy_ref}), {precompiled}"
        )
    return (
        f"{pkg} is in none of the repositories the driver container reads: enable the one that carries it (its repo "
        f"file in spec.driver.repoConfig.configMapName of {ctx.policy_ref}; on RHEL, the entitlement that enables "
        f"it), {precompiled}"
    )


def _repository(ctx: Context, link: str, m: re.Match[str], node: str) -> str | None:
    """The driver container does not reach a package repository: DNS, egress, a proxy it is not told of, or
    (RHEL) an entitlement the repository requires."""
    if not _operator_builds(ctx, link):
        return None
    where = next((m[g] for g in ("repo", "url", "host", "host2") if m[g]), "its package repository")
    return (
        f"the driver container does not reach {where}: give it the cluster's proxy (HTTP_PROXY, HTTPS_PROXY and "
        f"NO_PROXY in spec.driver.env of {ctx.policy_ref}) or a reachable mirror (its repo files in "
        "spec.driver.repoConfig.configMapName; on RHEL a valid entitlement), or use a precompiled driver "
        "(spec.driver.usePrecompiled=true)"
    )


Handler = Callable[[Context, str, re.Match[str], str], str | None]

#: The shapes, most specific first: a line is read by the first whose pattern matches and whose handler answers.
SHAPES: tuple[tuple[str, re.Pattern[str], str, Handler], ...] = (
    ("drain waits on a pod", DRAIN, "pod", _drain_waits),
    (
        "kernel module in use",
        re.compile(
            r"Module (?P<module>[\w-]+) is in use"
            r"|could not remove (?:module |')(?P<module2>[\w-]+)'?: (?:Device or resource busy|Resource temporarily)"
        ),
        "module",
        _module_in_use,
    ),
    (
        "kernel module not found for the running kernel",
        re.compile(r"Module (?P<module>[\w-]+) not found in directory /lib/modules/"),
        "module",
        _module_missing,
    ),
    (
        "kernel module refused as built",
        re.compile(r"could not insert '(?P<module>[\w-]+)': (?P<why>.+)"),
        "module",
        _module_insert,
    ),
    ("inotify limit", INOTIFY, "limit", _inotify),
    ("port already in use", PORT, "port", _port),
    ("socket with no daemon", SOCKET, "socket", _socket),
    ("host path the kernel does not provide", KERNEL_SOURCE, "path", kernel_source_missing),
    (
        "read-only file system",
        re.compile(r"(?:(?P<path>/[^\s\"':]+)\"?:\s*)?read-only file system", re.IGNORECASE),
        "path",
        _read_only,
    ),
    ("permission refused", PERMISSION, "path", _permission),
    ("path missing", MISSING_PATH, "path", _missing),
    ("no space left", NO_SPACE, "path", _no_space),
    ("out of memory", NO_MEMORY, "node", _no_memory),
    ("package not in the repositories", PACKAGE, "package", _package),
    ("package repository unreachable", REPOSITORY, "repository", _repository),
    ("argument or config of another release", FLAG, "flag", _release_skew),
)


def _named(m: re.Match[str], kind: str) -> str:
    """The object a match names: a pod as namespace/name, else its first group that matched, else what kind of
    object the shape is about."""
    if kind == "pod":
        return "/".join(v for v in (m["ns"] or m["ns2"] or m["ns3"], m["name"] or m["name2"] or m["name3"]) if v)
    return next((v for v in m.groupdict().values() if v), kind)


def shaped(ctx: Context, *, link: str, line: str, node: str = "") -> Shaped | None:
    """The repair of ``line`` (a message the catalog does not know, of a failure on ``link``, on ``node``) by its
    shape, or None where no shape fits it."""
    if not line:
        return None
    for shape, pattern, kind, handler in SHAPES:
        # Every place the shape shows, not only the first: a line may name a path no provider is known for before
        # one that has a provider.
        for m in pattern.finditer(line):
            action = handler(ctx, link, m, node)
            if action is not None:
                return Shaped(shape=shape, named=_named(m, kind), action=action)
    return None
