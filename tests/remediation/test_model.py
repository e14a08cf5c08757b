"""The published annotations and condition: round trips, actions from the shared XID table, errors."""

from __future__ import annotations

import json

import pytest

from gpuchain.gpu.xid import Resolution
from gpuchain.remediation.model import (
    FAULTS_ANNOTATION,
    PODS_ANNOTATION,
    AnnotationError,
    Fault,
    condition_for,
    decode_faults,
    decode_pods,
    encode_faults,
    encode_pods,
)


def test_faults_round_trip_and_stay_small() -> None:
    faults = {
        "GPU-a": Fault(uuid="GPU-a", gpu="GPU-a", xids=(79,), lost=True, covers=("GPU-a", "MIG-1")),
        "MIG-2": Fault(uuid="MIG-2", gpu="GPU-b", xids=(48,), lost=False, covers=("MIG-2",)),
    }
    text = encode_faults(faults)
    assert decode_faults(text) == faults
    assert json.loads(text)["MIG-2"] == {"gpu": "GPU-b", "xids": [48]}  # covers left out when it is just itself


def test_pods_round_trip_drops_empty_devices() -> None:
    text = encode_pods({"GPU-a": ("ml/b/main", "ml/a/main"), "GPU-b": ()})
    assert json.loads(text) == {"GPU-a": ["ml/a/main", "ml/b/main"]}
    assert decode_pods(text) == {"GPU-a": ("ml/a/main", "ml/b/main")}


@pytest.mark.parametrize(
    ("decode", "text", "key"),
    [
        (decode_faults, "[1]", FAULTS_ANNOTATION),
        (decode_faults, '{"GPU-a": 3}', FAULTS_ANNOTATION),
        (decode_faults, '{"GPU-a": {"xids": ["x"]}}', FAULTS_ANNOTATION),
        (decode_pods, "nope", PODS_ANNOTATION),
        (decode_pods, '{"GPU-a": ["only-a-name"]}', PODS_ANNOTATION),
    ],
)
def test_bad_annotations_name_the_key(decode: object, text: str, key: str) -> None:
    with pytest.raises(AnnotationError, match=key):
        decode(text)  # type: ignore[operator]


def test_fault_action_is_the_most_disruptive_from_the_shared_table() -> None:
    assert Fault(uuid="g", gpu="g", xids=(94,)).action is Resolution.RESTART_APP
    assert Fault(uuid="g", gpu="g", xids=(94, 48)).action is Resolution.RESET_GPU
    assert Fault(uuid="g", gpu="g", xids=(48, 79)).action is Resolution.REBOOT_NODE
    assert Fault(uuid="g", gpu="g", xids=(), lost=True).action is Resolution.REBOOT_NODE
    assert Fault(uuid="g", gpu="g", xids=(999,)).action is Resolution.RESET_GPU  # unknown XIDs are not safe
    assert Fault(uuid="g", gpu="g", xids=(13,), repeated=(13,)).action is Resolution.RESET_GPU  # past its threshold
    assert Fault(uuid="g", gpu="g", xids=(63, 92)).harmless  # NVIDIA's IGNORE: pods keep running
    assert not Fault(uuid="g", gpu="g", xids=(13, 31)).harmless  # RESTART_APP: the pods are evicted
    assert not Fault(uuid="g", gpu="g", xids=(63,), probes=("row-remap-pending",)).harmless


def test_condition_names_uuids_and_xids() -> None:
    assert condition_for({}) == ("True", "GPUsHealthy", "all GPUs healthy")
    status, reason, message = condition_for({"GPU-a": Fault(uuid="GPU-a", gpu="GPU-a", xids=(79,))})
    assert (status, reason) == ("False", "GPUXidError")
    assert "GPU-a" in message and "XID 79" in message and "fallen off the bus" in message
    assert condition_for({"GPU-a": Fault(uuid="GPU-a", gpu="GPU-a", xids=(79,), lost=True)})[1] == "GPULost"
