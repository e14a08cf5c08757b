"""gpuchain against the real control plane of tests/peers (kube-apiserver v1.37.2 + etcd + KCM).

What only a real server can say: the CRD's schema is enforced on write, kopf's runtime logs in with
a real kubeconfig and reconciles through real watches, service-account tokens are real identities
under RBAC, and `kubectl cluster-info dump` writes the layout the real kubectl writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes.cluster_policy import cluster_policy

from gpuchain.kube import CLUSTER_POLICY, CRD, DAEMONSET, NODE, POD, SERVICE, InvalidError, LiveCluster, name_of
from gpuchain.operator.operands import DRIVER, EXPORTER_SERVICE, NODE_AGENT, TOOLKIT
from gpuchain.operator.runtime import RuntimeConfig, run
from peers.apiserver import ApiServer

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "charts" / "gpuchain" / "crds" / "clusterpolicies.gpuchain.io.yaml"
NS = "gpu-operator"


def _until(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.1)


def install_crd(live: LiveCluster) -> None:
    """Create the chart's CRD and wait until the server serves its kind (Established)."""
    live.create(yaml.safe_load(CRD_FILE.read_text()))

    def established() -> bool:
        conditions = (live.get(CRD, name="clusterpolicies.gpuchain.io").get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    _until(established, "the ClusterPolicy CRD is established")


def gpu_node(name: str) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "feature.node.kubernetes.io/pci-10de.present": "true"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def test_the_server_is_the_pinned_release(apiserver: ApiServer) -> None:
    pinned = re.search(r"k8s\.io/kubernetes (v\S+)", (Path(__file__).parent / "go.mod").read_text())
    assert pinned is not None
    assert apiserver.request("GET", "/version")["gitVersion"] == pinned.group(1)


def test_the_servers_schema_check_accepts_the_default_policy_and_refuses_a_bad_one(live_cluster: LiveCluster) -> None:
    install_crd(live_cluster)
    live_cluster.create(cluster_policy("cluster-policy", {"mig": {"strategy": "mixed"}}))
    assert live_cluster.get(CLUSTER_POLICY, name="cluster-policy")["spec"]["mig"]["strategy"] == "mixed"
    with pytest.raises(InvalidError, match=r"spec\.mig\.strategy"):
        live_cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"mig": {"strategy": "sideways"}}})
    with pytest.raises(InvalidError, match="spec.operator.defaultRuntime"):
        live_cluster.create(cluster_policy("bad-runtime", {"operator": {"defaultRuntime": "podman"}}))
    assert live_cluster.get_or_none(CLUSTER_POLICY, name="bad-runtime") is None


def _roles(cluster: LiveCluster) -> list[str]:
    args = cluster.get(DAEMONSET, name=NODE_AGENT.name, namespace=NS)["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    roles: list[str] = args[args.index("--roles") + 1].split(",")
    return roles


async def test_the_operator_reconciles_through_real_watches(
    apiserver: ApiServer, live_cluster: LiveCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_crd(live_cluster)
    live_cluster.create(gpu_node("gpu-0"))
    live_cluster.create(gpu_node("gpu-1"))
    live_cluster.create(cluster_policy("cluster-policy", {"dcgmExporter": {"enabled": False}}))
    monkeypatch.setenv("KUBECONFIG", str(apiserver.kubeconfig))  # kopf logs in as a real client would
    stop = asyncio.Event()
    config = RuntimeConfig(namespace=NS, min_interval=0.05, resync=600)
    task = asyncio.create_task(
        run(LiveCluster.from_kubeconfig(str(apiserver.kubeconfig)), config=config, stop_flag=stop)
    )

    async def until(check: Any, what: str) -> None:
        deadline = time.monotonic() + 60
        while not await asyncio.to_thread(check):
            assert not task.done(), f"the operator stopped: {task.exception() if task.done() else ''}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.2)

    try:
        await until(lambda: "status" in live_cluster.get(CLUSTER_POLICY, name="cluster-policy"), "a status")
        # the default layout: NVIDIA's driver and toolkit, one node agent for the gpuchain operands
        wanted = {DRIVER.name, TOOLKIT.name, NODE_AGENT.name}
        await until(
            lambda: {name_of(d) for d in live_cluster.list(DAEMONSET, namespace=NS)} == wanted, "the DaemonSets"
        )
        status = live_cluster.get(CLUSTER_POLICY, name="cluster-policy")["status"]
        assert status["gpuNodes"] == 2
        assert status["operands"]["dcgm-exporter"]["state"] == "disabled"
        # The server defaulted and validated every DaemonSet the operator wrote.
        for ds in live_cluster.list(DAEMONSET, namespace=NS):
            assert ds["metadata"]["generation"] >= 1 and ds["spec"]["template"]["spec"]["containers"]
        # A spec change arrives through the watch and is acted on.
        live_cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"dcgmExporter": {"enabled": True}}})
        await until(lambda: "exporter" in _roles(live_cluster), "the node agent's exporter role")
        # the pass writes the DaemonSet before the Service, so the Service may land a moment later
        await until(
            lambda: live_cluster.get_or_none(SERVICE, name=EXPORTER_SERVICE, namespace=NS), "the exporter Service"
        )
        assert live_cluster.get(SERVICE, name=EXPORTER_SERVICE, namespace=NS)["spec"]["selector"] == {
            "app": NODE_AGENT.name
        }
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


def test_a_service_account_token_is_its_own_identity_under_rbac(apiserver: ApiServer, tmp_path: Path) -> None:
    """The fixture support the node-agent ValidatingAdmissionPolicy test needs: real SA tokens."""
    token = apiserver.service_account_token("gpuchain", "node-agent")
    agent = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig_for_token(token, tmp_path / "agent.kubeconfig")))
    admin = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig))
    try:
        admin.create(gpu_node("gpu-0"))
        with pytest.raises(Exception, match="forbidden"):
            agent.get(NODE, name="gpu-0")
        apiserver.request(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "metadata": {"name": "test-node-reader"},
                "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
            },
        )
        apiserver.request(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": "test-node-reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "test-node-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "node-agent", "namespace": "gpuchain"}],
            },
        )
        _until(lambda: _allowed(agent, "gpu-0"), "the RBAC binding takes effect")
        out = agent.patch(NODE, name="gpu-0", patch={"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}})
        assert out["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    finally:
        for path in (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/test-node-reader",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/test-node-reader",
        ):
            with contextlib.suppress(urllib.error.HTTPError):
                apiserver.request("DELETE", path)
        agent.close()
        admin.close()


def _allowed(agent: LiveCluster, node_name: str) -> bool:
    try:
        agent.get(NODE, name=node_name)
    except Exception:
        return False
    return True


KUBECTL = shutil.which("kubectl")


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl on PATH (Debian's kubectl or the cloud SDK's)")
def test_kubectl_cluster_info_dump_layout(apiserver: ApiServer, live_cluster: LiveCluster, tmp_path: Path) -> None:
    """What the real kubectl writes, pinned here so `gpuchain doctor --from-dump` reads that layout."""
    live_cluster.create(gpu_node("gpu-0"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "nodeName": "gpu-0",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    live_cluster.create(pod)
    out_dir = tmp_path / "dump"
    result = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), "cluster-info", "dump",
         "--namespaces", "ml,kube-system", "--output-directory", str(out_dir)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    files = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
    per_namespace = [
        "daemonsets.json", "deployments.json", "events.json", "pods.json",
        "replicasets.json", "replication-controllers.json", "services.json",
    ]  # fmt: skip
    expected = ["nodes.json", "ml/trainer/logs.txt"] + [
        f"{ns}/{f}" for ns in ("ml", "kube-system") for f in per_namespace
    ]
    assert files == sorted(expected)
    nodes = json.loads((out_dir / "nodes.json").read_text())
    assert nodes["kind"] == "NodeList" and [n["metadata"]["name"] for n in nodes["items"]] == ["gpu-0"]
    pods = json.loads((out_dir / "ml" / "pods.json").read_text())
    assert pods["kind"] == "PodList"
    assert pods["items"][0]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    # A pod no kubelet ran has no logs; kubectl still writes the file, saying so.
    assert (out_dir / "ml" / "trainer" / "logs.txt").is_file()
    assert live_cluster.get(POD, name="trainer", namespace="ml")["spec"]["nodeName"] == "gpu-0"


#: Kinds whose status the API server resets on create (a kubelet or controller writes it later).
_STATUS_WRITTEN_LATER = {"Pod", "DaemonSet", "ClusterPolicy"}


def copy_into(apiserver: ApiServer, live: LiveCluster, source: Any) -> None:
    """Recreate a simulated cluster's objects on the real server, writing status as its owners would."""
    from gpuchain.kube import CONFIGMAP, EVENT, RUNTIME_CLASS
    from gpuchain.operator.migrate import NVIDIA_CLUSTER_POLICY, NVIDIA_DRIVER

    install_crd(live)
    uids: dict[tuple[str, str | None, str], str] = {}  # (kind, namespace, name) -> uid on the real server
    server_owned = ("uid", "resourceVersion", "creationTimestamp")
    for kind in (
        NODE,
        CLUSTER_POLICY,
        NVIDIA_CLUSTER_POLICY,
        NVIDIA_DRIVER,
        RUNTIME_CLASS,
        DAEMONSET,
        CONFIGMAP,
        POD,
        EVENT,
    ):
        for obj in source.list(kind):
            meta = {k: v for k, v in obj["metadata"].items() if k not in server_owned}
            ns = meta.get("namespace")
            if ns:
                apiserver.ensure_namespace(ns)
            if meta.get("ownerReferences"):
                # The simulator leaves owner uids empty, which the real server refuses: use the owners' uids here.
                meta["ownerReferences"] = [
                    {**r, "uid": uids[(r["kind"], ns, r["name"])]} for r in meta["ownerReferences"]
                ]
            body = {**obj, "metadata": meta}
            if kind is POD:
                body["spec"] = {**body["spec"], "terminationGracePeriodSeconds": 0}
                if body["spec"].get("serviceAccountName"):  # the chart makes these; the server requires them
                    apiserver.ensure_service_account(ns, body["spec"]["serviceAccountName"])
            created = live.create(body)
            uids[(obj["kind"], ns, meta["name"])] = created["metadata"]["uid"]
            if obj.get("status") and obj["kind"] in _STATUS_WRITTEN_LATER:
                live.patch_status(kind, name=meta["name"], status=obj["status"], namespace=ns)


@pytest.mark.parametrize("scenario", ["friday-scale-out", "gpu-fell-off-bus", "mig-stuck-pending"])
def test_the_doctor_says_the_same_on_the_real_server(
    apiserver: ApiServer, live_cluster: LiveCluster, scenario: str
) -> None:
    """The doctor's diagnosis of a cluster is the same read from the real API server as from memory."""
    from gpuchain.doctor import run_doctor
    from gpuchain.sim import build, load_scenario

    sim = build(load_scenario(scenario))
    copy_into(apiserver, live_cluster, sim.cluster)
    expected = run_doctor(sim.cluster)
    live_cluster.calls.reset()
    report = run_doctor(live_cluster)
    assert [g.id for g in report.root_causes] == [g.id for g in expected.root_causes]
    assert [sorted(g.nodes) for g in report.root_causes] == [sorted(g.nodes) for g in expected.root_causes]
    assert report.api_calls == expected.api_calls


def test_a_node_bound_token_carries_its_node_to_admission_policies(apiserver: ApiServer, tmp_path: Path) -> None:
    """Fixture support for the chart's node-agent ValidatingAdmissionPolicy: a token bound to a pod
    on gpu-0 lets a policy tell gpu-0 from gpu-1. The policy here is a minimal stand-in with the
    same rule; the chart's own policy is tested in test_node_write_policy.py."""
    admin = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig))
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    vap = "/apis/admissionregistration.k8s.io/v1"
    try:
        admin.create(gpu_node("gpu-0"))
        admin.create(gpu_node("gpu-1"))
        apiserver.ensure_service_account("gpuchain", "node-agent")
        pod = admin.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "agent-gpu-0", "namespace": "gpuchain"},
                "spec": {
                    "nodeName": "gpu-0",
                    "serviceAccountName": "node-agent",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "agent", "image": "gpuchain"}],
                },
            }
        )
        token = apiserver.service_account_token("gpuchain", "node-agent", bound_pod=pod)
        apiserver.request(
            "POST",
            f"{rbac}/clusterroles",
            {"metadata": {"name": "test-node-agent"},
             "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]},
        )  # fmt: skip
        apiserver.request(
            "POST",
            f"{rbac}/clusterrolebindings",
            {"metadata": {"name": "test-node-agent"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "test-node-agent"},
             "subjects": [{"kind": "ServiceAccount", "name": "node-agent", "namespace": "gpuchain"}]},
        )  # fmt: skip
        node_claim = "authentication.kubernetes.io/node-name"
        apiserver.request(
            "POST",
            f"{vap}/validatingadmissionpolicies",
            {
                "metadata": {"name": "test-own-node-only"},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
                        ]
                    },
                    "matchConditions": [
                        {
                            "name": "node-agents",
                            "expression": "request.userInfo.username.startsWith('system:serviceaccount:gpuchain:')",
                        }
                    ],
                    "validations": [
                        {
                            "expression": f"'{node_claim}' in request.userInfo.extra && "
                            f"request.userInfo.extra['{node_claim}'][0] == object.metadata.name",
                            "message": "a node agent may change only its own Node",
                        }
                    ],
                },
            },
        )
        apiserver.request(
            "POST",
            f"{vap}/validatingadmissionpolicybindings",
            {"metadata": {"name": "test-own-node-only"},
             "spec": {"policyName": "test-own-node-only", "validationActions": ["Deny"]}},
        )  # fmt: skip
        agent = LiveCluster.from_kubeconfig(str(apiserver.kubeconfig_for_token(token, tmp_path / "agent.kubeconfig")))
        try:
            label = {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}}

            def denied_elsewhere() -> bool:
                try:  # a patch that changes nothing still passes admission, and writes nothing
                    agent.patch(NODE, name="gpu-1", patch={"metadata": {"labels": {"probe": None}}})
                except Exception as exc:  # forbidden: first RBAC until it syncs, then the policy
                    return "only its own Node" in str(exc)
                return False

            _until(denied_elsewhere, "the policy denies gpu-0's agent writing gpu-1")
            # A validation with no `reason` denies as 422 Invalid (not 403), so callers see InvalidError.
            with pytest.raises(InvalidError, match="only its own Node"):
                agent.patch(NODE, name="gpu-1", patch=label)
            out = agent.patch(NODE, name="gpu-0", patch=label)
            assert out["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
            assert "nvidia.com/gpu.present" not in admin.get(NODE, name="gpu-1")["metadata"]["labels"]
        finally:
            agent.close()
    finally:
        for path in (f"{rbac}/clusterrolebindings/test-node-agent", f"{rbac}/clusterroles/test-node-agent"):
            with contextlib.suppress(urllib.error.HTTPError):
                apiserver.request("DELETE", path)
        admin.close()


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl on PATH (Debian's kubectl or the cloud SDK's)")
def test_kubectl_gpuchain_doctor_through_the_real_kubectl(apiserver: ApiServer, live_cluster: LiveCluster) -> None:
    """kubectl finds the kubectl-gpuchain plugin on PATH and hands it the arguments, as users run it."""
    import os
    import sys

    from gpuchain.doctor import run_doctor
    from gpuchain.sim import build, load_scenario

    plugin_dir = Path(sys.executable).parent
    if not (plugin_dir / "kubectl-gpuchain").exists():
        pytest.skip(f"no kubectl-gpuchain entry point beside {sys.executable} (scripts/setup installs it)")
    sim = build(load_scenario("gpu-fell-off-bus"))
    copy_into(apiserver, live_cluster, sim.cluster)
    env = {**os.environ, "PATH": f"{plugin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(KUBECTL), "gpuchain", "doctor", "--kubeconfig", str(apiserver.kubeconfig), "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # 1: the doctor found something
    assert json.loads(result.stdout)["rootCauses"] == [g.id for g in run_doctor(sim.cluster).root_causes]
