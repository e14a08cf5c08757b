"""Error lines the catalog does not know, answered by their shape and the object they name (doctor/shapes.py): each
shape read from a line as its writer prints it (the source of each wording beside it), the repair that shape names
for that object on that link, and the doctor's fix putting it first while the line stays reported as unrecognised."""

from __future__ import annotations

import functools

import pytest
from doctor.small_cluster import diagnosed
from doctor.test_doctor_release_fixes import PLUGIN as PLUGIN_STACK
from doctor.test_doctor_release_fixes import _root, _standalone

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, index
from gpuchain.doctor.next_steps import next_step
from gpuchain.doctor.shapes import shaped
from gpuchain.doctor.snapshot import gather
from gpuchain.sim import build, parse_scenario


@functools.cache
def _ctx(stack: str) -> Context:
    """The doctor's view of a one-node cluster of ``stack`` (gpu-operator: the ClusterPolicy installs the driver;
    nvidia-device-plugin: the host's driver)."""
    sim = build(parse_scenario(f"name: x\nstack: {stack}\nnodes:\n  - {{name: gpu-1}}\n"))
    return index(gather(sim.cluster))


OPERATOR, PLUGIN = "gpu-operator", "nvidia-device-plugin"


def _action(line: str, *, link: str = "driver", stack: str = OPERATOR) -> str:
    found = shaped(_ctx(stack), link=link, line=line, node="gpu-1")
    assert found is not None, line
    return found.action


def test_nouveau_in_use_is_kept_off_the_gpus_at_boot() -> None:
    """kmod-project/kmod tools/rmmod.c@v30: ERR("Module %s is in use\\n"), prefixed "rmmod: ERROR: "."""
    action = _action("rmmod: ERROR: Module nouveau is in use")
    assert "blacklist nouveau" in action and "initramfs" in action and "reboot" in action


def test_an_nvidia_module_in_use_is_released_by_its_holders() -> None:
    """kmod-project/kmod tools/rmmod.c@v30: ERR("Module %s is in use by:") and the holders after it."""
    action = _action("rmmod: ERROR: Module nvidia_drm is in use by: nvidia_uvm")
    assert "kubectl drain gpu-1" in action and "nvidia-persistenced" in action and "blacklist" not in action
    assert "delete the driver pod" in action
    host = _action("rmmod: ERROR: Module nvidia_drm is in use by: nvidia_uvm", stack=PLUGIN)
    assert "modprobe -r nvidia_uvm" in host and "driver pod" not in host
    # Any other module: what holds it, not the GPU clients.
    # modprobe -r -w's words once its wait ends (tools/modprobe.c@v30 "could not remove '%s': %s").
    assert "nvidia-persistenced" in _action(
        "modprobe: ERROR: could not remove 'nvidia': Resource temporarily unavailable"
    )
    other = _action("modprobe: FATAL: Module ib_core is in use.")
    assert "lsmod | grep ib_core" in other and "nvidia-persistenced" not in other


def test_a_module_not_found_for_the_running_kernel_is_installed_again_the_stacks_way() -> None:
    """kmod-project/kmod tools/modprobe.c@v30: LOG("Module %s not found in directory %s\\n"). The operator's driver
    pod does its full install (FORCE_REINSTALL, its env in the ClusterPolicy); a host driver is rebuilt (DKMS)."""
    line = "modprobe: FATAL: Module nvidia-uvm not found in directory /lib/modules/5.15.0-1020-aws"
    assert "FORCE_REINSTALL=true in spec.driver.env" in _action(line)
    host = _action(line, stack=PLUGIN)
    assert "dkms autoinstall -k $(uname -r)" in host and "FORCE_REINSTALL" not in host
    # A module the driver does not build: the kernel's package that carries it.
    assert "linux-modules-extra" in _action("modprobe: FATAL: Module ib_core not found in directory /lib/modules/6.8")


def test_a_module_refused_as_built_is_rebuilt_after_draining() -> None:
    """kmod-project/kmod tools/modprobe.c@v30: ERR("could not insert '%s': %s\\n", ..., strerror(-err)), EINVAL
    for a symbol CRC that disagrees with the loaded module exporting it."""
    action = _action("modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument")
    assert action.startswith("rebuild nvidia_peermem") and "kubectl drain gpu-1" in action and "InfiniBand" in action
    # A signature the kernel does not trust (EKEYREJECTED; EPERM from lockdown): Secure Boot, not a rebuild.
    for why in ("Key was rejected by service", "Operation not permitted"):
        unsigned = _action(f"modprobe: ERROR: could not insert 'nvidia': {why}")
        assert "Secure Boot" in unsigned and "mokutil" in unsigned and "rebuild" not in unsigned
    # SELinux's EACCES is neither (kmod.insert-permission-denied knows it for nvidia*; no shape for the rest).
    assert shaped(_ctx(OPERATOR), link="driver", line="could not insert 'ib_umad': Permission denied") is None


@pytest.mark.parametrize(
    ("line", "link", "expected"),
    [
        # golang/go src/os/exec/exec.go@go1.22.0 Error(): "exec: " + strconv.Quote(name) + ": " + err, LookPath's
        # os.Stat error "stat %s: no such file or directory".
        (
            'exec: "/usr/bin/nvidia-container-runtime": stat /usr/bin/nvidia-container-runtime: no such file or '
            "directory",
            "toolkit",
            "nvidia-container-toolkit-base",
        ),
        # golang/go src/os/exec/lp_unix.go@go1.22.0 ErrNotFound "executable file not found in $PATH", as logrus
        # quotes it inside msg="...".
        (
            'level=error msg="error running hook: exec: \\"nvidia-container-cli\\": executable file not found in '
            '$PATH"',
            "toolkit",
            "libnvidia-container-tools",
        ),
        # glibc elf/dl-load.c@glibc-2.35: "cannot open shared object file", dlerror's "%s: %s: %s".
        (
            "could not load NVML library: libnvidia-ml.so.1: cannot open shared object file: No such file or directory",
            "device-plugin",
            "user-space",
        ),
        # bash's "%s: command not found" (bash execute_cmd.c@bash-5.2).
        ("/bin/bash: line 1: nvidia-smi: command not found", "driver", "nvidia-utils-<branch>"),
        # Go os.Stat's PathError "stat %s: %s"; a path under the operator's driver root.
        ("stat /run/nvidia/driver/usr/bin/nvidia-smi: no such file or directory", "toolkit", "umount -l /run/nvidia"),
        ("open /dev/nvidiactl: no such file or directory", "device-plugin", "nvidia-ctk system create-device-nodes"),
        # NVIDIA/nvidia-installer common-utils/common-utils.c@f670484e "Failure creating directory '%s' : (%s)".
        (
            "ERROR: Failure creating directory '/run/nvidia/driver/usr/lib/x86_64-linux-gnu' : (No such file or "
            "directory)",
            "driver",
            "findmnt /run/nvidia/driver",
        ),
        ("stat /var/lib/kubelet/device-plugins: no such file or directory", "device-plugin", "--root-dir"),
    ],
)
def test_a_missing_path_is_put_back_by_what_provides_it(line: str, link: str, expected: str) -> None:
    assert expected in _action(line, link=link)


def test_a_missing_path_no_provider_is_known_for_has_no_shape() -> None:
    """A path the chain does not provide says nothing of who should have made it: the link's step stays; where the
    line names one after it that has a provider, that one answers."""
    line = "open /etc/foo/bar.conf: no such file or directory"
    assert shaped(_ctx(OPERATOR), link="toolkit", line=line) is None
    both = shaped(_ctx(OPERATOR), link="toolkit", line=f"{line}; stat /usr/bin/nvidia-ctk: no such file or directory")
    assert both is not None and both.named == "/usr/bin/nvidia-ctk"


def test_mig_handles_need_the_monitor_capability_and_devices_privilege() -> None:
    """NVML's NVML_ERROR_NO_PERMISSION text "Insufficient Permissions" (NVIDIA/go-nvml pkg/nvml/nvml.h@v0.12.4-1) on
    a MIG handle (k8s-device-plugin's "error getting MIG device handle: %v"); EACCES on a device file as Go's os.Open
    prints it ("open %s: permission denied")."""
    mig = _action("Fatal: error getting MIG device handle: Insufficient Permissions", link="device-plugin")
    assert "NVIDIA_MIG_MONITOR_DEVICES=all" in mig and "SYS_ADMIN" in mig
    device = _action("open /dev/nvidia0: permission denied", link="exporter")
    assert "securityContext.privileged: true" in device and "/dev/nvidia0" in device
    # Go's net.OpError on a socket the container may not open ("dial unix %s: connect: permission denied").
    sock = "dial unix /var/lib/kubelet/device-plugins/kubelet.sock: connect: permission denied"
    assert "may not use /var/lib/kubelet/device-plugins/kubelet.sock" in _action(sock, link="device-plugin")


def test_a_read_only_file_system_is_an_immutable_os() -> None:
    """Go os.MkdirAll's PathError "mkdir %s: %s" with EROFS ("read-only file system")."""
    toolkit = _action("mkdir /usr/local/nvidia: read-only file system", link="toolkit")
    assert "spec.toolkit.installDir" in toolkit and "system extensions" in toolkit
    driver = _action("mkdir /usr/lib/modules/6.1.58-talos/nvidia: read-only file system")
    assert "spec.driver.enabled=false" in driver and "installDir" not in driver


def test_a_socket_that_refuses_names_the_daemon_behind_it() -> None:
    """Go's net.OpError: "dial unix %s: connect: %s" (ECONNREFUSED, or ENOENT where no socket file is)."""
    containerd = _action(
        "unable to connect: dial unix /run/containerd/containerd.sock: connect: connection refused", link="toolkit"
    )
    assert "systemctl status containerd" in containerd and "CONTAINERD_SOCKET" in containerd
    kubelet = _action(
        "dial unix /var/lib/kubelet/device-plugins/kubelet.sock: connect: no such file or directory",
        link="device-plugin",
    )
    assert "systemctl status kubelet" in kubelet
    dcgm = _action("dial tcp 10.0.0.7:5555: connect: connection refused", link="exporter")
    assert "nv-hostengine" in dcgm and "DCGM_REMOTE_HOSTENGINE_INFO" in dcgm
    # client-go reaching the API server through the kubernetes Service: the node's network, not the component.
    api = _action('Get "https://10.96.0.1:443/api/v1/nodes/gpu-1": dial tcp 10.96.0.1:443: i/o timeout', link="gfd")
    assert "kube-proxy and CNI pods" in api and "spec.nodeName=gpu-1" in api


def test_a_port_in_use_is_another_process_or_a_second_copy() -> None:
    """Go's net.OpError: "listen tcp %s: bind: address already in use" (EADDRINUSE)."""
    exporter = _action("listen tcp :9400: bind: address already in use", link="exporter")
    assert "ss -ltnp 'sport = :9400'" in exporter and 'DCGM_EXPORTER_LISTEN=":9401"' in exporter
    assert "DCGM_EXPORTER_LISTEN" not in _action("listen tcp :2112: bind: address already in use", link="gfd")


def test_an_argument_of_another_release_sets_image_and_arguments_from_one() -> None:
    """spf13/pflag flag.go@v1.0.5 "unknown flag: --%s"; golang/go src/encoding/json/decode.go@go1.22.0
    "json: unknown field %q"."""
    plugin = _action("Error: unknown flag: --device-discovery-strategy", link="device-plugin")
    assert plugin.startswith("--device-discovery-strategy is from another release")
    assert "spec.devicePlugin.version" in plugin
    host = _action('error: json: unknown field "sharing"', link="device-plugin", stack=PLUGIN)
    assert "helm upgrade" in host and "spec.devicePlugin" not in host


def test_a_drain_waiting_on_a_pod_deletes_or_frees_that_pod() -> None:
    """kubernetes/kubectl pkg/drain/drain.go@v0.33.0: "evicting pod %s/%s"."""
    found = shaped(_ctx(OPERATOR), link="driver", line="evicting pod kubeflow-user/jupyter-nb-0")
    assert found is not None and found.named == "kubeflow-user/jupyter-nb-0"
    assert "kubectl -n kubeflow-user delete pod jupyter-nb-0 --force --grace-period=0" in found.action
    assert "kubectl -n kubeflow-user get pdb" in found.action


def test_node_resources_space_inotify_and_memory() -> None:
    """inotify(7): inotify_init1 fails EMFILE at fs.inotify.max_user_instances, inotify_add_watch ENOSPC at
    max_user_watches (k8s-device-plugin's "failed to create FS watcher: %v"); ENOSPC and ENOMEM as strerror prints
    them."""
    assert "fs.inotify.max_user_instances" in _action(
        "failed to create FS watcher: too many open files", link="device-plugin"
    )
    assert "fs.inotify.max_user_watches" in _action(
        "failed to add watch: inotify_add_watch: no space left on device", link="device-plugin"
    )
    disk = _action("write /var/lib/containerd/tmp/x: no space left on device", link="toolkit")
    assert "df -h /var/lib/containerd/tmp/x" in disk
    assert "reboot" in _action("modprobe: ERROR: could not insert 'nvidia': Cannot allocate memory")


def test_a_line_of_no_shape_keeps_the_links_step() -> None:
    ctx = _ctx(OPERATOR)
    line = "Error: failed to get driver version from the host"
    assert shaped(ctx, link="driver", line=line) is None
    step = next_step(ctx, link="driver", line=line)
    assert step.startswith("the driver container builds the module") and "otherwise" not in step


def test_next_step_puts_the_shape_first_and_the_links_step_after() -> None:
    step = next_step(_ctx(OPERATOR), link="device-plugin", line="listen tcp :8080: bind: address already in use")
    first, _, otherwise = step.partition("; otherwise: ")
    assert first.startswith("another process on the node holds port 8080") and "port already in use (8080)" in first
    assert otherwise.startswith("move the device plugin to NVIDIA's newest release")


def test_the_doctor_fixes_an_unknown_driver_line_by_its_shape_and_still_reports_it() -> None:
    """The driver container's rmmod of nouveau (gpu-driver-container's nvidia-driver unloads it before it loads its
    own module) failing as kmod words it; the line is in no catalog entry, so it stays log.unrecognised, and both
    the driver's finding and the unrecognised one lead with the shape's repair."""
    line = "rmmod: ERROR: Module nouveau is in use"
    assert catalog.unknown_error(line) == line
    report = diagnosed(
        "name: x\nstack: gpu-operator\nnodes:\n  - {name: gpu-1}\n",
        {
            "do": "pod",
            "daemonset": "nvidia-driver-daemonset",
            "node": "gpu-1",
            "containers": [
                {
                    "name": "nvidia-driver-ctr",
                    "restarts": 4,
                    "state": {"waiting": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"},
                    "last": {"terminated": "Error", "exitCode": 1},
                }
            ],
            "logs": {"nvidia-driver-ctr": f"Unloading nouveau driver...\n{line}\n"},
        },
    )
    root = next(f for f in report.findings if f.root)
    assert root.link == "driver" and f"unrecognised: {line}" in root.evidence
    assert root.fix.lstrip("# ").startswith("keep nouveau off the GPUs")
    unknown = next(f for f in report.findings if f.id == "log.unrecognised")
    assert unknown.link == "driver" and "keep nouveau off the GPUs" in unknown.fix


def test_an_older_release_with_a_shaped_line_leads_with_the_shape_not_the_upgrade() -> None:
    """A standalone dcgm-exporter of an older release exiting as go-dcgm words a host engine that does not answer
    (Go's net.OpError "dial tcp %s: connect: connection refused", as logrus writes a fatal): the repair is the host
    engine, so it leads, and the newest release is the "otherwise"; a line of no shape keeps the upgrade first."""
    image = "nvcr.io/nvidia/k8s/dcgm-exporter:2.4.6-2.6.10-ubuntu20.04"
    refused = 'time="2022-07-19T14:22:41Z" level=fatal msg="dial tcp 10.0.0.7:5555: connect: connection refused"'
    root = _root(diagnosed(PLUGIN_STACK, *_standalone("dcgm-exporter", image, refused + "\n")))
    assert root.link == "exporter" and f"unrecognised: {refused}" in root.evidence
    assert root.fix.startswith("# no DCGM host engine listens at 10.0.0.7:5555")
    assert "; otherwise: move dcgm-exporter to NVIDIA's newest release" in root.fix
    assert "kubectl -n monitoring set image" not in root.fix
    stopped = 'time="2022-07-19T14:22:41Z" level=fatal msg="collector stopped"\n'
    plain = _root(diagnosed(PLUGIN_STACK, *_standalone("dcgm-exporter", image, stopped)))
    assert plain.fix.startswith("kubectl -n monitoring set image ds/dcgm-exporter")


def test_a_package_the_driver_container_cannot_install_names_its_repositories() -> None:
    """rpm-software-management/yum cli.py "No package %s available."; libdnf's "Failed to download metadata for
    repo '%s'"; curl's "Could not resolve host: %s". Only the operator's driver container installs packages: on
    a host driver stack the line has no shape."""
    kernel = _action("No package kernel-devel-4.18.0-372.el8.x86_64 available.")
    assert "publish no kernel-devel-4.18.0-372.el8.x86_64 for this node's kernel" in kernel
    assert "spec.driver.repoConfig.configMapName" in kernel and "spec.driver.usePrecompiled=true" in kernel
    other = _action("No match for argument: elfutils-libelf-devel")
    assert other.startswith("elfutils-libelf-devel is in none of the repositories") and "entitlement" in other
    repo = _action("Error: Failed to download metadata for repo 'rhel-8-for-x86_64-baseos-eus-rpms'")
    assert "does not reach rhel-8-for-x86_64-baseos-eus-rpms" in repo and "HTTPS_PROXY" in repo
    assert shaped(_ctx(PLUGIN), link="driver", line="No package kernel-devel-4.18.0 available.") is None


def test_a_later_line_of_a_known_shape_answers_for_an_error_line_of_none() -> None:
    """The drain helper's progress line (kubectl pkg/drain/drain.go@v0.33.0 "evicting pod %s/%s") after an error
    line of no shape: the first message with a shape answers."""
    step = next_step(
        _ctx(OPERATOR), link="driver", line='level=error msg="drain did not finish"', last="evicting pod ml/trainer-0"
    )
    assert step.startswith("the drain waits on pod ml/trainer-0")


#: glibc's loader, elf/dl-load.c@glibc-2.39 ("error while loading shared libraries", "cannot open shared object
#: file"), as runc passes the hook's stderr on: nvidia-container-cli links libelf (NVIDIA/libnvidia-container
#: mk/elftoolchain.mk@v1.17.4 builds it in only where the distribution's package does not ship it).
LIBELF = (
    "/usr/bin/nvidia-container-cli: error while loading shared libraries: libelf.so.1: cannot open shared object "
    "file: No such file or directory"
)
#: NVIDIA/nvidia-container-toolkit internal/lookup/library.go@v1.14.0 "error loading ldcache: %v", wrapped by the
#: runtime's "failed to create NVIDIA Container Runtime: %v" (cmd/nvidia-container-runtime/main.go@v1.14.0).
LDCACHE = (
    "failed to create NVIDIA Container Runtime: failed to construct OCI spec modifier: failed to construct "
    "discoverer: failed to create mounts discoverer: failed to construct library locator: error loading ldcache: "
    "open /etc/ld.so.cache: no such file or directory: unknown"
)


def test_a_library_the_toolkits_cli_links_against_is_installed_not_the_runtime_config_rewritten() -> None:
    action = _action(LIBELF, link="toolkit", stack=PLUGIN)
    assert "/usr/bin/nvidia-container-cli cannot start: libelf.so.1" in action
    assert "provides libelf.so.1" in action and "system extension" in action
    # A library of the chain's own keeps its provider's repair.
    own = _action("error while loading shared libraries: libnvidia-ml.so.1: cannot open shared object", link="toolkit")
    assert "driver's user-space" in own and "links against" not in own


def test_a_missing_linker_cache_is_written_by_ldconfig() -> None:
    action = _action(LDCACHE, link="toolkit", stack=PLUGIN)
    assert "ldconfig" in action and "NVIDIA_DRIVER_CAPABILITIES" in action


def _plugin_init_refused(message: str) -> dict[str, object]:
    """The plugin pod's init container refused at create, as containerd 1.7 reports a failing prestart hook."""
    return {
        "do": "pod",
        "daemonset": "nvidia-device-plugin-daemonset",
        "namespace": "kube-system",
        "node": "gpu-1",
        "init": [
            {
                "name": "nvidia-device-plugin-init",
                "restarts": 6,
                "state": {"waiting": "CrashLoopBackOff", "message": "back-off 2m40s restarting failed container"},
                "last": {"terminated": "StartError", "exitCode": 128, "message": message},
            }
        ],
    }


def test_a_hook_wrappers_inner_words_answer_before_the_runtime_config_is_written_again() -> None:
    """runc's "error running prestart hook #0" (libcontainer/configs/config.go@v1.1.12, HookList.Run) is a wrapper
    the catalog knows; the loader's words it carries name what repairs it."""
    wrapped = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        "failed: unable to start container process: error during container init: error running prestart hook #0: "
        f"exit status 127, stdout: , stderr: Auto-detected mode as 'legacy'\n{LIBELF}"
    )
    scenario = (
        "name: x\nstack: nvidia-device-plugin\nnodes:\n  - {name: gpu-1, hostDriver: '570.133.20', "
        "osImage: Flatcar Container Linux 4152.2.3}\n"
    )
    root = next(f for f in diagnosed(scenario, _plugin_init_refused(wrapped)).findings if f.root)
    assert (root.id, root.link) == ("toolkit.hook-failed", "toolkit")
    assert root.fix.index("libelf.so.1") < root.fix.index("otherwise write the nvidia runtime")


def _workload_refused(message: str) -> dict[str, object]:
    """A GPU workload pod ``viz-*`` of the node gpu-1 whose container the runtime refused at create."""
    return {
        "do": "pod",
        "daemonset": "viz",
        "namespace": "lab",
        "node": "gpu-1",
        "containers": [
            {
                "name": "main",
                "restarts": 3,
                "state": {"waiting": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"},
                "last": {"terminated": "StartError", "exitCode": 128, "message": message},
            }
        ],
    }


WORKLOADS = (
    "name: x\nstack: nvidia-device-plugin\nnodes:\n  - {name: gpu-1, hostDriver: '535.183.01'}\n"
    "workloads:\n  - {name: viz, namespace: lab, count: 2, node: gpu-1}\n"
)


def test_gpu_pods_refused_by_a_hook_wrapper_get_the_repair_its_inner_words_name() -> None:
    """runc's prestart-hook wrapper on a workload (the catalog's runc.prestart-hook-failed): the loader's words it
    carries come first, the wrapper's own repair after."""
    wrapped = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
        "failed: unable to start container process: error during container init: error running prestart hook #0: "
        f"exit status 127, stdout: , stderr: {LIBELF}"
    )
    (found,) = [f for f in diagnosed(WORKLOADS, _workload_refused(wrapped)).findings if f.link == "toolkit"]
    assert found.id == "workload.runtime-hook-failed"
    assert found.fix.index("libelf.so.1") < found.fix.index("otherwise")


def test_gpu_pods_the_nvidia_runtime_refuses_in_unknown_words_are_the_toolkits_quoted() -> None:
    """No entry knows the words, but they are the NVIDIA runtime's own: a toolkit finding that quotes them as
    unrecognised, with their shape's repair first; nothing was reported for such pods before."""
    refused = _workload_refused(
        f"failed to create containerd task: failed to create shim task: OCI runtime create failed: {LDCACHE}"
    )
    found = [f for f in diagnosed(WORKLOADS, refused).findings if f.id == "workload.runtime-hook-failed"]
    assert len(found) == 1 and found[0].link == "toolkit"
    assert any(e.startswith("unrecognised: ") and "ld.so.cache" in e for e in found[0].evidence)
    assert found[0].fix.index("ldconfig") < found[0].fix.index("otherwise write the nvidia runtime")
