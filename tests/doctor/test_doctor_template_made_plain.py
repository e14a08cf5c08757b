"""The toolkit pointed at k3s's or RKE2's Go template (config.toml.tmpl): besides the rendered config.toml, the
repair the reporters of rancher/rke2#3385 used is the template made plain TOML, which those distributions render to
itself, so the toolkit can parse it and what it writes there outlives their restarts. Said only where the template's
place is known (the toolkit's env names it, or the node's kubelet names the distribution); a plain kubeadm node has
no template to make plain. The parse error is pelletier/go-toml's (catalog nvidia-container-toolkit.load-config).
"""

from __future__ import annotations

from doctor.small_cluster import diagnosed
from doctor.test_doctor_lower_link_classes import CRASH, TEMPLATE

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Report

RKE2 = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"


def _toolkit_fix(kubelet: str) -> str:
    scenario = "name: t\nstack: gpu-operator\nnodes:\n  - {name: r, preset: t4-x4}\n"
    crash = {"name": "nvidia-container-toolkit-ctr", "restarts": 3, "state": CRASH, "last": {"terminated": "Error"}}
    report: Report = diagnosed(
        scenario,
        {"do": "node", "node": "r", "nodeInfo": {"kubeletVersion": kubelet}},
        {
            "do": "pod",
            "daemonset": "nvidia-container-toolkit-daemonset",
            "node": "r",
            "containers": [crash],
            "logs": {"nvidia-container-toolkit-ctr": TEMPLATE},
        },
    )
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR and f.link == "toolkit"]
    return root.fix


def test_on_rke2_the_template_made_plain_is_the_other_repair() -> None:
    fix = _toolkit_fix("v1.24.4+rke2r1")
    assert f'"CONTAINERD_CONFIG","value":"{RKE2}"' in fix
    assert "make it plain TOML with concrete values, no {{ }} expressions" in fix
    assert f"cp {RKE2} {RKE2}.tmpl" in fix


def test_on_a_node_no_distribution_names_there_is_no_template_to_make_plain() -> None:
    assert "plain TOML" not in _toolkit_fix("v1.30.2")
