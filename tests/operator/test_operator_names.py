"""Kubernetes name rules as the API server applies them, against Kubernetes' own test tables.

The good and bad values are the ones in kubernetes/kubernetes
staging/src/k8s.io/apimachinery/pkg/util/validation/validation_test.go (commit 008b365):
TestIsDNS1123Label, TestIsDNS1123Subdomain, TestIsQualifiedName, TestIsValidLabelValue.
"""

from __future__ import annotations

import pytest

from gpuchain.operator.manifests import label_key_problem, label_value_problem, name_problem, toleration_problem

LABEL_GOOD = ["a", "ab", "abc", "a1", "a-1", "a--1--2--b", "0", "01", "012", "1a", "1-a", "1--a--b--2", "a" * 63]
LABEL_BAD = [
    "",
    "A",
    "ABC",
    "aBc",
    "A1",
    "A-1",
    "1-A",
    "-",
    "a-",
    "-a",
    "1-",
    "-1",
    "_",
    "a_",
    "_a",
    "a_b",
    "1_",
    "_1",
    "1_2",
    ".",
    "a.",
    ".a",
    "a.b",
    "1.",
    ".1",
    "1.2",
    " ",
    "a ",
    " a",
    "a b",
    "1 ",
    " 1",
    "1 2",
    "a" * 64,
]
SUBDOMAIN_GOOD = [
    "a",
    "ab",
    "abc",
    "a1",
    "a-1",
    "a--1--2--b",
    "0",
    "01",
    "012",
    "1a",
    "1-a",
    "1--a--b--2",
    "a.a",
    "ab.a",
    "abc.a",
    "a1.a",
    "a-1.a",
    "a--1--2--b.a",
    "a.1",
    "ab.1",
    "abc.1",
    "a1.1",
    "a-1.1",
    "a--1--2--b.1",
    "0.a",
    "01.a",
    "012.a",
    "1a.a",
    "1-a.a",
    "0.1",
    "01.1",
    "012.1",
    "1a.1",
    "1-a.1",
    "1--a--b--2.1",
    "a.b.c.d.e",
    "aa.bb.cc.dd.ee",
    "1.2.3.4.5",
    "11.22.33.44.55",
    "a" * 253,
]
SUBDOMAIN_BAD = [
    "",
    "A",
    "ABC",
    "aBc",
    "A1",
    "A-1",
    "1-A",
    "-",
    "a-",
    "-a",
    "1-",
    "-1",
    "_",
    "a_",
    "_a",
    "a_b",
    "1_",
    "_1",
    "1_2",
    ".",
    "a.",
    ".a",
    "a..b",
    "1.",
    ".1",
    "1..2",
    " ",
    "a ",
    " a",
    "a b",
    "1 ",
    " 1",
    "1 2",
    "A.a",
    "aB.a",
    "ab.A",
    "A1.a",
    "a1.A",
    "A.1",
    "aB.1",
    "A1.1",
    "1A.1",
    "0.A",
    "01.A",
    "012.A",
    "1A.a",
    "1a.A",
    "A.B.C.D.E",
    "AA.BB.CC.DD.EE",
    "a.B.c.d.e",
    "aa.bB.cc.dd.ee",
    "a@b",
    "a,b",
    "a_b",
    "a;b",
    "a:b",
    "a%b",
    "a?b",
    "a$b",
    "a" * 254,
]
QUALIFIED_GOOD = [
    "simple",
    "now-with-dashes",
    "1-starts-with-num",
    "1234",
    "simple/simple",
    "now-with-dashes/simple",
    "now-with-dashes/now-with-dashes",
    "now.with.dots/simple",
    "now-with.dashes-and.dots/simple",
    "1-num.2-num/3-num",
    "1234/5678",
    "1.2.3.4/5678",
    "Uppercase_Is_OK_123",
    "example.com/Uppercase_Is_OK_123",
    "requests.storage-foo",
    "a" * 63,
    "a" * 253 + "/" + "b" * 63,
]
QUALIFIED_BAD = [
    "nospecialchars%^=@",
    "cantendwithadash-",
    "-cantstartwithadash-",
    "only/one/slash",
    "Example.com/abc",
    "example_com/abc",
    "example.com/",
    "/simple",
    "a" * 64,
    "a" * 254 + "/abc",
]
VALUE_GOOD = ["simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "a" * 63, ""]
VALUE_BAD = [
    "nospecialchars%^=@",
    "Tama-nui-te-rā.is.Māori.sun",
    "\\backslashes\\are\\bad",
    "-starts-with-dash",
    "ends-with-dash-",
    ".starts.with.dot",
    "ends.with.dot.",
    "a" * 64,
]


@pytest.mark.parametrize("value", LABEL_GOOD)
def test_dns_label_good(value: str) -> None:
    assert name_problem(value, "label") is None


@pytest.mark.parametrize("value", LABEL_BAD)
def test_dns_label_bad(value: str) -> None:
    assert name_problem(value, "label") is not None


@pytest.mark.parametrize("value", SUBDOMAIN_GOOD)
def test_dns_subdomain_good(value: str) -> None:
    assert name_problem(value) is None


@pytest.mark.parametrize("value", SUBDOMAIN_BAD)
def test_dns_subdomain_bad(value: str) -> None:
    assert name_problem(value) is not None


@pytest.mark.parametrize("value", QUALIFIED_GOOD)
def test_label_key_good(value: str) -> None:
    assert label_key_problem(value) is None


@pytest.mark.parametrize("value", QUALIFIED_BAD)
def test_label_key_bad(value: str) -> None:
    assert label_key_problem(value) is not None


@pytest.mark.parametrize("value", VALUE_GOOD)
def test_label_value_good(value: str) -> None:
    assert label_value_problem(value) is None


@pytest.mark.parametrize("value", VALUE_BAD)
def test_label_value_bad(value: str) -> None:
    assert label_value_problem(value) is not None


@pytest.mark.parametrize(
    ("tol", "ok"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"operator": "Exists"}, True),  # tolerates every taint
        ({"key": "a", "value": "b"}, True),  # operator defaults to Equal
        ({"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}, True),
        ({"key": "a", "value": "b", "operator": "Exists"}, False),  # value must be empty with Exists
        ({"value": "b"}, False),  # no key needs operator Exists
        ({"key": "a", "operator": "In"}, False),
        ({"key": "a", "effect": "NoRun"}, False),
        ({"key": "a", "operator": "Exists", "tolerationSeconds": 30}, False),  # needs NoExecute
        ({"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "30"}, False),
        ({"key": 5}, False),
        ({"key": "bad key!"}, False),
    ],
)
def test_tolerations(tol: dict, ok: bool) -> None:  # type: ignore[type-arg]
    assert (toleration_problem(tol) is None) is ok, toleration_problem(tol)
