"""The XID policy table and NVIDIA's DP_*_HEALTHCHECKS semantics."""

from __future__ import annotations

import pytest

from gpuchain.gpu.xid import HealthPolicy, Resolution, default_ignored, describe, policy_from_env


def test_default_ignored_set_is_nvidias() -> None:
    assert frozenset({13, 31, 43, 45, 68, 109}) == default_ignored()


def test_table_rows() -> None:
    assert describe(79).resolution is Resolution.REBOOT_NODE and describe(79).unhealthy
    assert describe(48).resolution is Resolution.RESET_GPU
    assert describe(13).resolution is Resolution.RESTART_APP and not describe(13).unhealthy
    unknown = describe(9999)
    assert unknown.unhealthy and unknown.resolution is Resolution.RESET_GPU and not unknown.catalogued


def test_default_policy() -> None:
    p = HealthPolicy()
    assert p.marks_unhealthy(79)
    assert not p.marks_unhealthy(13)


@pytest.mark.parametrize(
    ("env", "xid", "unhealthy"),
    [
        ({"DP_DISABLE_HEALTHCHECKS": "all"}, 79, False),
        ({"DP_DISABLE_HEALTHCHECKS": "xids"}, 79, False),
        ({"DP_DISABLE_HEALTHCHECKS": "48, 79"}, 79, False),
        ({"DP_DISABLE_HEALTHCHECKS": "48"}, 79, True),
        ({"DP_ENABLE_HEALTHCHECKS": "13"}, 13, True),
        ({"DP_ENABLE_HEALTHCHECKS": "all"}, 31, True),
        ({"DP_DISABLE_HEALTHCHECKS": "13", "DP_ENABLE_HEALTHCHECKS": "13"}, 13, True),
    ],
)
def test_environment(env: dict[str, str], xid: int, unhealthy: bool) -> None:
    assert policy_from_env(env).marks_unhealthy(xid) is unhealthy


def test_disable_all_turns_checks_off() -> None:
    assert policy_from_env({"DP_DISABLE_HEALTHCHECKS": "ALL"}).checks is False


@pytest.mark.parametrize("value", ["sometimes", "-3", "0"])
def test_bad_value_names_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match="DP_DISABLE_HEALTHCHECKS"):
        policy_from_env({"DP_DISABLE_HEALTHCHECKS": value})
