"""Fuzz every input reader: 0 tracebacks and 0 hangs (issue 15 done-when).

Each reader (device plugin / GFD / gpu-health config, mig-parted config, topology, scenario,
ClusterPolicy file, exporter collectors CSV) gets arbitrary bytes, valid seed files with random
byte damage, deep nesting and duplicate keys. It must return its model or raise the one-line
error type of its format; any other exception is a traceback a user would see. The deadline turns
a reader that hangs (or goes quadratic) into a failure. Bounded: a fixed number of examples per
reader, derandomized so CI runs the same corpus every time.
"""

from __future__ import annotations

import datetime
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuchain.api.config.v1.load import load_config
from gpuchain.commands.operator import PolicyDocument
from gpuchain.common.inputfile import ConfigFileError
from gpuchain.common.yamlfile import load_yaml_file
from gpuchain.exporter.counters import DEFAULT_COLLECTORS, CollectorsFileError, load_collectors
from gpuchain.gpu.topology import load_topology
from gpuchain.mig.config import load_config as load_mig_config
from gpuchain.sim.scenario import load_scenario

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuchain"
DEVICE_PLUGIN_SEED = b"""version: v1
flags:
  migStrategy: mixed
  plugin: {deviceListStrategy: [envvar], deviceIDStrategy: uuid}
sharing:
  timeSlicing:
    renameByDefault: false
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""
MIG_SEED = b"""version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""

READERS: dict[str, tuple[Callable[[Path], Any], bytes]] = {
    "device-plugin config": (lambda p: load_config(p, env={}), DEVICE_PLUGIN_SEED),
    "mig-parted config": (load_mig_config, MIG_SEED),
    "topology": (
        lambda p: load_topology(str(p)),
        (SRC / "gpu" / "presets" / "h100-80gb-x8-mig-mixed.yaml").read_bytes(),
    ),
    "scenario": (load_scenario, (SRC / "sim" / "scenarios" / "driver-version-skew.yaml").read_bytes()),
    "ClusterPolicy": (lambda p: load_yaml_file(PolicyDocument, path=p), b"spec:\n  driver: {enabled: false}\n"),
    "collectors CSV": (load_collectors, (SRC / "exporter" / DEFAULT_COLLECTORS).read_bytes()),
}
EXPECTED = (ConfigFileError, CollectorsFileError)
SETTINGS = settings(
    max_examples=30,
    deadline=datetime.timedelta(seconds=3),
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


@st.composite
def damaged(draw: st.DrawFn, seed: bytes) -> bytes:
    """The seed with a few bytes replaced, inserted or deleted (NUL, high bytes, YAML syntax)."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from([b"\x00", b"\xff", b"\xe9", b":", b"- ", b"{", b"[", b"&a ", b"*a", b"\n  ", b"!!python/object ", b"\t"]))  # fmt: skip
        how = draw(st.sampled_from(["insert", "replace", "delete"]))
        if how == "insert":
            data[at:at] = junk
        elif how == "replace":
            data[at : at + len(junk)] = junk
        else:
            del data[at : at + draw(st.integers(1, 20))]
    return bytes(data)


def structural() -> st.SearchStrategy[bytes]:
    """Deep nesting, duplicate keys, empty/null, other encodings, huge numbers."""
    depth = st.integers(1, 6000)
    return st.one_of(
        depth.map(lambda n: b"a: " + b"[" * n + b"]" * n),
        depth.map(lambda n: b"a: " + b"{b: " * n + b"1" + b"}" * n),
        depth.map(lambda n: b"".join(b"  " * i + b"k:\n" for i in range(min(n, 400)))),
        st.integers(1, 50).map(lambda n: b"version: v1\n" * n),
        st.sampled_from([b"", b"null", b"~", b"---\n", b"[]", b"42", b"'text'", b"a: 9" + b"9" * 5000]),
        st.text(max_size=200).map(lambda t: t.encode("utf-16")),
    )


def _run(reader: Callable[[Path], Any], data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="gc-fuzz-") as tmp:
        path = Path(tmp) / "input.yaml"
        path.write_bytes(data)
        try:
            reader(path)
        except EXPECTED as exc:
            assert "\n" not in str(exc), str(exc)


@pytest.mark.parametrize("name", sorted(READERS))
def test_arbitrary_bytes(name: str) -> None:
    reader, _ = READERS[name]

    @SETTINGS
    @given(st.binary(max_size=4096))
    def run(data: bytes) -> None:
        _run(reader, data)

    run()


@pytest.mark.parametrize("name", sorted(READERS))
def test_damaged_seed_files(name: str) -> None:
    reader, seed = READERS[name]
    _run(reader, seed)  # the seed itself is valid

    @SETTINGS
    @given(damaged(seed))
    def run(data: bytes) -> None:
        _run(reader, data)

    run()


@pytest.mark.parametrize("name", sorted(READERS))
def test_structural_attacks(name: str) -> None:
    reader, _ = READERS[name]

    @SETTINGS
    @given(structural())
    def run(data: bytes) -> None:
        _run(reader, data)

    run()
