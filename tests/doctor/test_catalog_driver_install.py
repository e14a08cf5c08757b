"""The driver install's last words (catalog.yaml, the driver-install block): a driver pod that ends on one of
nvidia-installer's errors, the kernel module's refusal of a GPU, an entrypoint's FATAL line of another OS flavour or
the driver manager's cleanup guidance is read as that message, with the catalog's repair that names the key to set,
not as an unrecognised line with a generic fix.

The excerpts are the messages as their sources print them: nvidia-installer's ``ui_error``/``ui_warn`` strings
(NVIDIA/nvidia-installer kernel.c, misc.c@580.95.05) behind the stream UI's "ERROR: " / "WARNING: " prefix
(stream-ui.c stream_message), on one line where the output is no terminal, as in a container's log
(common-utils/msg.c format()); the kernel module's lines (NVIDIA/open-gpu-kernel-modules
src/nvidia/arch/nvalloc/unix/src/osapi.c@580.95.05); the entrypoints' echo lines (NVIDIA/gpu-driver-container
sle15/nvidia-driver@25.01.21, vgpu-manager/rhel9/nvidia-driver@06a208ca9747c82b1ba99b76ecdcf2469b0a0207) and the
driver manager's (NVIDIA/k8s-driver-manager cmd/driver-manager/messages.go@v0.12.0)."""

from __future__ import annotations

import textwrap

import pytest
from doctor.small_cluster import crashing_pod, diagnosed
from doctor.test_doctor_lower_catalog import OPERATOR, _cites, _driver_manager, _root

from gpuchain.doctor import catalog

DRIVER_DS, DRIVER_CTR = "nvidia-driver-daemonset", "nvidia-driver-ctr"

#: The driver container's step before nvidia-installer runs (gpu-driver-container ubuntu22.04/nvidia-driver
#: _install_driver@06a208ca9747c82b1ba99b76ecdcf2469b0a0207).
INSTALLING = "Installing NVIDIA driver kernel modules...\n\n"
#: nvidia-installer's closing error after any failure (install-from-cwd.c@580.95.05), which no entry knows: it
#: names no cause.
FAILED = (
    "\nERROR: Installation has failed.  Please see the file '/var/log/nvidia-installer.log' for details.  You may "
    "find suggestions on fixing installation problems in the README available on the Linux driver download page at "
    "www.nvidia.com.\n"
)
#: nvidia-installer's generic load failure (kernel.c@580.95.05), printed with the specific reason the kernel gave.
LOAD_FAILED = (
    "ERROR: Unable to load the kernel module 'nvidia.ko'.  This happens most frequently when this kernel module was "
    "built against the wrong or improperly configured kernel sources, with a version of gcc that differs from the one "
    "used to build the target kernel, or if another driver, such as nouveau, is present and prevents the NVIDIA "
    "kernel module from obtaining ownership of the NVIDIA device(s), or no NVIDIA device installed in this system is "
    "supported by this NVIDIA Linux graphics driver release.\n\nPlease see the log entries 'Kernel module load error' "
    "and 'Kernel messages' at the end of the file '/var/log/nvidia-installer.log' for more information.\n"
)
#: The open module's refusal of a GPU without GSP (a V100, PCI ID 10de:1db4) in the kernel log, then the driver
#: container's own `modprobe nvidia` failing with ENODEV (kmod tools/modprobe.c@v30).
OPEN_ON_VOLTA = (
    "NVRM: The NVIDIA GPU 0000:00:1e.0 (PCI ID: 10de:1db4)\n"
    "NVRM: installed in this system is not supported by open\n"
    "NVRM: nvidia.ko because it does not include the required GPU\n"
    "NVRM: System Processor (GSP).\n"
    "NVRM: The NVIDIA probe routine failed for 1 device(s).\n"
    "NVRM: None of the NVIDIA devices were initialized.\n"
    "+ modprobe nvidia\n"
    "modprobe: ERROR: could not insert 'nvidia': No such device\n"
)

#: The entries of the driver-install block, in the catalog's order (nine sit before the generic lines printed with
#: them; the rest at the end of catalog.yaml).
BLOCK = (
    "nvidia-kernel.gpu-needs-proprietary",
    "nvidia-kernel.vgpu-host-needs-proprietary",
    "nvidia-kernel.gpu-not-in-release",
    "nvidia-kernel.bar-invalid",
    "nvidia-kernel.no-gpu-found",
    "nvidia-installer.module-type-incompatible",
    "nvidia-installer.load-no-device",
    "nvidia-installer.load-unknown-symbol",
    "nvidia-installer.load-invalid-argument",
    "nvidia-installer.module-path-unknown",
    "nvidia-installer.kernel-source-path",
    "nvidia-installer.kernel-header-missing",
    "nvidia-installer.kernel-source-unconfigured",
    "nvidia-installer.kernel-output-missing",
    "nvidia-installer.module-not-created",
    "nvidia-installer.sign-file-missing",
    "nvidia-installer.sign-hash-unknown",
    "nvidia-installer.sign-failed",
    "nvidia-installer.peermem-module-failed",
    "nvidia-installer.optional-module-failed",
    "nvidia-installer.build-dir-failed",
    "nvidia-installer.module-unload-failed",
    "nvidia-installer.module-test-load-failed",
    "nvidia-installer.module-type-absent",
    "nvidia-installer.module-type-invalid",
    "nvidia-installer.kernel-module-loaded",
    "nvidia-installer.system-utility-missing",
    "nvidia-installer.dev-tool-missing",
    "nvidia-installer.alternate-install",
    "nvidia-installer.dkms-missing",
    "nvidia-installer.dkms-failed",
    "driver-container.sles-kernel-packages",
    "driver-container.sles-repos-unreachable",
    "driver-container.repos-unreachable",
    "driver-container.kernel-package-missing",
    "driver-container.vgpu-manager-stop-failed",
    "driver-container.vgpu-previous-install",
    "driver-container.vgpu-enable-vfs-failed",
    "k8s-driver-manager.cleanup-held-by-upgrade-policy",
    "k8s-driver-manager.cleanup-eviction-disabled",
    "k8s-driver-manager.gpu-clients-not-terminated",
    "k8s-driver-manager.stale-rootfs",
    "k8s-driver-manager.module-unload-refused",
    "kernel.peermem-symbol-version",
    "kernel.peermem-unknown-symbol",
    "kernel.nvidia-symbol-mismatch",
    "kernel.nvidia-parameter-invalid",
)


def _block() -> tuple[catalog.Entry, ...]:
    """The block's entries (KeyError for an id the catalog lacks)."""
    return tuple(catalog.entry(i) for i in BLOCK)


def _installer(prefix: str, entry: catalog.Entry) -> str:
    """``entry``'s message as nvidia-installer prints it into a container's log: its level's prefix, one line."""
    return f"{INSTALLING}{prefix}{catalog.printed(entry.line, entry.args)}\n"


def test_the_block_holds_forty_sourced_entries_of_the_driver_link() -> None:
    block = _block()
    assert len(block) == len(set(BLOCK)) >= 40
    assert {e.link for e in block} == {"driver"}
    # A fix that acts: a key, a command or a package, never the diagnosis again.
    acting = ("spec.", "kubectl", "reboot", "install", "umount", "kill", "BIOS", "ENABLE_", "crictl")
    assert [e.id for e in block if not any(a in e.fix for a in acting)] == []
    # Each names the upstream file and version its line was read from, in the catalog's form.
    assert all(e.source.split("/")[0] in ("NVIDIA", "torvalds") and "@" in e.source for e in block)


@pytest.mark.parametrize(
    "entry", [e for e in _block() if e.source.startswith("NVIDIA/nvidia-installer")], ids=lambda e: e.id
)
def test_each_installer_message_in_a_container_log_is_known_as_itself(entry: catalog.Entry) -> None:
    """Each message, with its level's prefix and the installer's closing error after it, is read as its own entry:
    no entry earlier in the catalog takes its line or the lines printed with it."""
    prefix = "WARNING: " if entry.level == "warning" else "ERROR: " if entry.level == "error" else ""
    found = catalog.known_error(_installer(prefix, entry) + FAILED, "driver")
    assert found is not None and found.entry.id == entry.id, found
    assert catalog.unknown_error(_installer(prefix, entry) + FAILED) is None


@pytest.mark.parametrize(
    "entry_id",
    [
        "nvidia-installer.kernel-source-path",
        "nvidia-installer.kernel-header-missing",
        "nvidia-installer.kernel-source-unconfigured",
        "nvidia-installer.kernel-output-missing",
        "nvidia-installer.sign-file-missing",
        "nvidia-installer.sign-hash-unknown",
    ],
)
def test_a_message_wrapped_at_a_terminal_is_known_by_its_first_words(entry_id: str) -> None:
    """On a terminal nvidia-installer wraps the message at its width, the rest indented under the prefix
    (common-utils nv_format_text_rows); a long path may push all but the first words onto the next line."""
    entry = catalog.entry(entry_id)
    text = textwrap.fill(
        catalog.printed(entry.line, entry.args), width=40, initial_indent="ERROR: ", subsequent_indent=" " * 7
    )
    assert "\n" in text
    found = catalog.known_error(text, "driver")
    assert found is not None and found.entry.id == entry_id


def test_the_kernel_modules_refusal_of_a_gpu_outranks_modprobes_enodev() -> None:
    """The open module's "not supported by open" names the cause (no GSP); modprobe's ENODEV and the probe lines after
    it in the same log only say that no GPU was taken, and would send the user to blacklist nouveau."""
    found = catalog.known_error(OPEN_ON_VOLTA, "driver")
    assert found is not None and found.entry.id == "nvidia-kernel.gpu-needs-proprietary"
    assert "kernelModuleType=proprietary" in found.entry.fix
    # Without that line the generic ENODEV entry still answers: the order, not the pattern, made the difference.
    rest = "\n".join(ln for ln in OPEN_ON_VOLTA.splitlines() if "not supported by open" not in ln)
    other = catalog.known_error(rest, "driver")
    assert other is not None and other.entry.id != "nvidia-kernel.gpu-needs-proprietary"


def test_a_gpu_this_release_does_not_support_is_not_read_as_the_open_modules_refusal() -> None:
    text = (
        "NVRM: The NVIDIA GPU 0000:00:04.0 (PCI ID: 10de:1b38)\n"
        "NVRM: installed in this system is not supported by the\n"
        "NVRM: NVIDIA 580.95.05 driver release.\n"
    )
    found = catalog.known_error(text, "driver")
    assert found is not None and found.entry.id == "nvidia-kernel.gpu-not-in-release"
    assert "spec.driver.version" in found.entry.fix


@pytest.mark.parametrize(
    ("reason", "entry_id", "key"),
    [
        ("Invalid argument", "nvidia-installer.load-invalid-argument", "kernelModuleConfig"),
        ("Unknown symbol in module", "nvidia-installer.load-unknown-symbol", "linux-headers-<kernel>"),
        ("Exec format error", "nvidia-installer.load-unknown-symbol", "usePrecompiled=false"),
    ],
)
def test_the_kernels_reason_for_a_failed_load_outranks_the_installers_generic_error(
    reason: str, entry_id: str, key: str
) -> None:
    """nvidia-installer prints the kernel's reason ("Kernel module load error: %s", kernel.c) after its generic
    "Unable to load the kernel module" error, whose repair (blacklist nouveau) does not repair these."""
    text = f"{INSTALLING}{LOAD_FAILED}-> Kernel module load error: {reason}\n{FAILED}"
    found = catalog.known_error(text, "driver")
    assert found is not None and found.entry.id == entry_id and key in found.entry.fix


# -- end to end: the repair reaches the driver finding ------------------------------------------------------------


@pytest.mark.parametrize(
    ("log", "entry_id", "key"),
    [
        (
            INSTALLING
            + "WARNING: The 'kernel-open' kernel modules are incompatible with the GPU(s) detected on this system. They "
            "will be installed anyway, but are not expected to work.\n\n" + LOAD_FAILED + FAILED,
            "nvidia-installer.module-type-incompatible",
            "spec.driver.kernelModuleType",
        ),
        (
            INSTALLING + "ERROR: The kernel source path '/lib/modules/6.8.0-1021-aws/build' does not exist.  Please "
            "make sure you have installed the kernel source files for your kernel.\n" + FAILED,
            "nvidia-installer.kernel-source-path",
            "spec.driver.repoConfig",
        ),
        (
            INSTALLING + "ERROR: The nvidia-peermem kernel module failed to build. This kernel module is required for "
            "the proper operation of GPUDirect RDMA p2p memory sharing. If you do not need to use GPUDirect RDMA p2p "
            "memory sharing, you can try to install this driver package again with the '--no-peermem' option.\n"
            + FAILED,
            "nvidia-installer.peermem-module-failed",
            "spec.driver.rdma.enabled=false",
        ),
        (
            "Installing Linux kernel source...\n"
            "FATAL: failed to install kernel packages. Ensure SLES subscription is available.\n",
            "driver-container.sles-kernel-packages",
            "SUSEConnect",
        ),
    ],
    ids=["open-modules-on-volta", "kernel-source-path", "peermem", "sles-subscription"],
)
def test_the_driver_finding_carries_the_messages_repair(log: str, entry_id: str, key: str) -> None:
    root = _root(diagnosed(OPERATOR, crashing_pod(DRIVER_DS, DRIVER_CTR, "n1", log)))
    assert (root.id, root.link, root.node) == ("driver.not-ready", "driver", "n1")
    assert _cites(root, entry_id), root.evidence
    assert key in root.fix and "<node>" not in root.fix
    assert not any(e.startswith("unrecognised:") for e in root.evidence)


def test_the_driver_managers_cleanup_guidance_names_the_eviction_setting() -> None:
    """k8s-driver-manager v0.12.0 (cmd/driver-manager/main.go cleanupOnFailure) warns why it could not clear the
    node before the error it returns; with eviction and drain both off, the setting that lets it is the repair."""
    log = (
        'time="2026-01-01T00:00:00Z" level=info msg="Performing cleanup on failure"\n'
        'time="2026-01-01T00:00:00Z" level=warning msg="Cleanup could not automatically proceed on node n1 because '
        'both GPU pod eviction and auto-drain are disabled."\n'
        'time="2026-01-01T00:00:01Z" level=fatal msg="failed to evict GPU operator components: timed out waiting '
        'for the condition"\n'
    )
    root = _root(diagnosed(OPERATOR, _driver_manager(log)))
    assert (root.link, root.node) == ("driver", "n1")
    assert _cites(root, "k8s-driver-manager.cleanup-eviction-disabled")
    assert "ENABLE_GPU_POD_EVICTION=true" in root.fix and "spec.driver.manager.env" in root.fix


@pytest.mark.parametrize(
    ("kernel", "entry_id", "key"),
    [
        ("nvidia: disagrees about version of symbol module_layout", "kernel.nvidia-symbol-mismatch", "linux-headers"),
        (
            "nvidia: `yes' invalid for parameter `NVreg_EnableGpuFirmware'",
            "kernel.nvidia-parameter-invalid",
            "nvidia.conf",
        ),
    ],
)
def test_the_kernels_line_names_what_modprobes_errno_does_not(kernel: str, entry_id: str, key: str) -> None:
    """The driver container's `modprobe nvidia` (kmod tools/modprobe.c@v30) reports EINVAL alone, which no entry
    knows; the kernel's own line (torvalds/linux kernel/module/version.c, kernel/params.c@v6.6) says whether the
    module's build or a parameter was refused."""
    modprobe = "+ modprobe nvidia\nmodprobe: ERROR: could not insert 'nvidia': Invalid argument\n"
    assert catalog.known_error(modprobe, "driver") is None
    found = catalog.known_error(f"{kernel}\n{modprobe}", "driver")
    assert found is not None and found.entry.id == entry_id and key in found.entry.fix
