"""Bad ClusterPolicy input is refused with a clear status condition; nothing is half-applied."""

from __future__ import annotations

import pytest
from fakes.operand_simulator import OperandSimulator
from operator_helpers import NS, PER_OPERAND, converge, make_cluster

from gpuchain.kube import CLUSTER_POLICY, DAEMONSET, NODE, RUNTIME_CLASS, SERVICE_ACCOUNT
from gpuchain.operator.policy import ClusterPolicySpec, parse_policy
from gpuchain.operator.reconcile import reconcile


def _conditions(cluster) -> dict:  # type: ignore[no-untyped-def]
    status = cluster.get(CLUSTER_POLICY, name="cluster-policy")["status"]
    return {c["type"]: c for c in status["conditions"]}


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"mig": {"strategy": "balanced"}}, "spec.mig.strategy", "'balanced' is not one of"),
        ({"daemonsets": {"updateStrategy": "Recreate"}}, "spec.daemonsets.updateStrategy", "'Recreate'"),
        ({"devicePlugin": {"repository": "Registry.Example/GPU Chain"}}, "spec.devicePlugin.repository", "not valid"),
        ({"driver": {"version": "550 latest"}}, "spec.driver.version", "not valid"),
        ({"driver": {"upgradePolicy": {"maxUnavailable": "lots"}}}, "spec.driver.upgradePolicy.maxUnavailable", "lots"),
        ({"driver": {"enabld": True}}, "spec.driver.enabld", "did you mean 'enabled'"),
        ({"someFutureKey": {"ignored": True}}, "spec.someFutureKey", "unknown key"),
    ],
)
def test_bad_spec_sets_error_condition_and_deploys_nothing(spec: dict, field: str, words: str) -> None:
    cluster = make_cluster(spec=spec)
    result = reconcile(cluster, name="cluster-policy", namespace=NS)
    assert result.state == "notReady"
    assert str(result.problems[0]).startswith(field)
    conds = _conditions(cluster)
    assert conds["Error"]["status"] == "True" and conds["Error"]["reason"] == "InvalidSpec"
    assert field in conds["Error"]["message"] and words in conds["Error"]["message"]
    assert conds["Ready"]["status"] == "False"
    assert cluster.list(DAEMONSET, namespace=NS) == [], "nothing is applied from a bad policy"
    cluster.calls.reset()
    reconcile(cluster, name="cluster-policy", namespace=NS)
    assert cluster.calls.writes == 0, "a bad policy does not make the operator loop writing"


def test_fixing_a_bad_spec_recovers() -> None:
    cluster = make_cluster(spec={"mig": {"strategy": "balanced"}})
    sim = OperandSimulator(cluster, NS)
    reconcile(cluster, name="cluster-policy", namespace=NS)
    cluster.patch(CLUSTER_POLICY, name="cluster-policy", patch={"spec": {"mig": {"strategy": "mixed"}}})
    assert converge(cluster, sim).state == "ready"
    conds = _conditions(cluster)
    assert conds["Error"]["status"] == "False" and conds["Ready"]["status"] == "True"


def test_nvidia_keys_parse() -> None:
    policy = parse_policy(
        {
            "driver": {"enabled": False},
            "toolkit": {"enabled": True, "version": "v1.17.0-ubuntu22.04"},
            "devicePlugin": {"config": {"name": "time-slicing-config", "default": "any"}},
            "dcgmExporter": {"enabled": True},
            "gfd": {"enabled": True},
            "migManager": {"enabled": True, "config": {"default": "all-balanced"}},
            "mig": {"strategy": "mixed"},
            "daemonsets": {"priorityClassName": "gpu-critical", "tolerations": [{"operator": "Exists"}]},
        }
    )
    assert isinstance(policy, ClusterPolicySpec)
    assert not policy.driver.enabled
    assert policy.device_plugin.config.name == "time-slicing-config"
    assert policy.mig_manager.config.default == "all-balanced"
    assert policy.toolkit.image_ref() == "nvcr.io/nvidia/k8s/container-toolkit:v1.17.0-ubuntu22.04"
    assert policy.driver.image_ref().startswith("nvcr.io/nvidia/driver:")


def test_digest_image_reference() -> None:
    digest = "sha256:" + "a" * 64
    policy = parse_policy({**PER_OPERAND, "gfd": {"version": digest}})  # its own image: its own DaemonSet
    assert isinstance(policy, ClusterPolicySpec)
    assert policy.gfd.image_ref().endswith("@" + digest)


def test_unknown_keys_are_problems_naming_the_field() -> None:
    problems = parse_policy(
        {"driver": {"enabld": True, "upgradePolicy": {"drain": {"enabel": True}}}, "gfd": {"enabled": True}}
    )
    assert isinstance(problems, list)
    assert sorted(p.field for p in problems) == ["driver.enabld", "driver.upgradePolicy.drain.enabel"]
    assert any("did you mean 'enable'?" in str(p) for p in problems)


def test_schema_and_image_problems_are_reported_together() -> None:
    problems = parse_policy(
        {
            "driver": {"enabld": True, "version": "550 latest"},
            "devicePlugin": {"repository": "Registry.Example/GPU Chain"},
            "mig": {"strategy": "balanced"},
        }
    )
    assert isinstance(problems, list)
    assert {p.field for p in problems} == {"driver.enabld", "mig.strategy", "driver.version", "devicePlugin.repository"}


def test_snake_case_keys_are_unknown_like_in_the_crd() -> None:
    # The CRD only knows camelCase keys (the API server would prune the rest): so does the parser.
    problems = parse_policy({"devicePlugin": {"image_pull_policy": "Always"}})
    assert isinstance(problems, list)
    assert [str(p) for p in problems] == [
        "spec.devicePlugin.image_pull_policy: unknown key; did you mean 'imagePullPolicy'?"
    ]


def test_manifests_the_api_server_would_refuse_are_not_half_applied() -> None:
    # The spec is valid but the namespace is not a DNS label: every namespaced object would be
    # refused, so none is applied (the RuntimeClass, cluster-scoped, would have been accepted).
    cluster = make_cluster()
    result = reconcile(cluster, name="cluster-policy", namespace="Bad_Namespace!")
    assert result.state == "notReady"
    conds = _conditions(cluster)
    assert conds["Error"]["reason"] == "InvalidSpec"
    assert "metadata.namespace: 'Bad_Namespace!' is not a valid DNS label" in conds["Error"]["message"]
    assert cluster.list(RUNTIME_CLASS) == [] and cluster.list(SERVICE_ACCOUNT) == [] and cluster.list(DAEMONSET) == []


def test_nvidia_null_keys_mean_unset() -> None:
    # NVIDIA's sample writes `validator: {plugin: }` (null); Go and the API server read it as unset.
    policy = parse_policy({"validator": {"plugin": None}, "driver": {"enabled": None}})
    assert isinstance(policy, ClusterPolicySpec)
    assert policy.driver.enabled and policy.validator.plugin.env == []


def test_toolkit_runtime_comes_from_the_nodes_not_the_deprecated_default_runtime() -> None:
    # NVIDIA's operator ignores operator.defaultRuntime (deprecated) and reads the GPU nodes' runtime;
    # a stale "docker" from an old chart must not configure Docker on CRI-O nodes.
    cluster = make_cluster(spec={"operator": {"defaultRuntime": "docker"}})
    for n in cluster.list(NODE):
        cluster.patch_status(
            NODE, name=n["metadata"]["name"], status={"nodeInfo": {"containerRuntimeVersion": "cri-o://1.30.2"}}
        )
    reconcile(cluster, name="cluster-policy", namespace=NS)
    toolkit = cluster.get(DAEMONSET, name="nvidia-container-toolkit-daemonset", namespace=NS)
    env = {e["name"]: e.get("value") for e in toolkit["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["RUNTIME"] == "crio"
