"""k3s's and RKE2's own nvidia runtime: found at their start, never written by hand.

k3s and RKE2 render their embedded containerd's config.toml afresh at every start, and add an ``nvidia`` runtime to
it only where they find the nvidia-container-runtime binary: in the GPU Operator's /usr/local/nvidia/toolkit or the
packages' /usr/bin (k3s-io/k3s pkg/agent/containerd/runtimes.go@080ec81 findNvidiaContainerRuntimes, which RKE2's
agent runs as well); from their October 2024 patch releases on (k3s-io/k3s#10998, the backport of "Custom path for
runtimes autodetect") they look the binary up on their service's PATH instead (runtimes.go@cd1fadb exec.LookPath).
A toolkit installed anywhere else (a host whose /usr is read-only, as on Flatcar) is never found, and
``nvidia-ctk runtime configure`` into the rendered file is lost at the next start; what repairs is the binary where
the search looks, or the runtime in the template k3s and RKE2 render from (config.toml.tmpl), then the service
restarted so it renders again.
"""

from __future__ import annotations

from gpuchain.doctor.node import KUBEADM, Distribution

#: Where k3s and RKE2 look for nvidia-container-runtime, in their order (runtimes.go locationsToCheck).
SEARCHED = ("/usr/local/nvidia/toolkit", "/usr/bin")
#: The suffix of the Go template k3s and RKE2 render their containerd config from (docs.k3s.io advanced).
TEMPLATE = ".tmpl"


def autodetect_repair(dist: Distribution) -> str | None:
    """The node work that gives k3s's or RKE2's containerd its nvidia runtime where no toolkit pod writes it; None
    on a distribution whose containerd reads a config it does not render itself."""
    if dist is KUBEADM:
        return None
    first = SEARCHED[0]
    return (
        f"{dist.name} writes {dist.containerd_config} itself at every start (an edit there is lost) and adds the "
        f"nvidia runtime only where it finds nvidia-container-runtime ({' or '.join(SEARCHED)}; from its October "
        f"2024 releases also on its service's PATH): where the toolkit is installed elsewhere, symlink its binaries "
        f"into a searched path (mkdir -p {first} && ln -s <toolkit dir>/nvidia-container-runtime* {first}/), or "
        f"upgrade {dist.name} to a release that searches PATH and add the toolkit's directory to the PATH of the "
        f"{dist.name} service, or add the nvidia runtime to {dist.containerd_config}{TEMPLATE}; then {dist.restart}"
    )
