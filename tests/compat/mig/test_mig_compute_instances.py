"""mig-parted's own compute-instance test set, applied with gpuchain on a simulated A100-SXM4-40GB.

Fixture (fixtures/SOURCES.md): every configuration of mig-parted's A100-SXM4-40GB config group
(``pkg/mig/config/known_configs.go``, 15 device types from ``1c.1g.5gb`` to ``7c.7g.40gb``),
which its ``TestGetSetMigConfig`` applies to a DGX A100 mock one by one, asserting that each
succeeds and that ``GetMigConfig`` reads the GPU back as exactly that configuration.

That mock does not hold NVIDIA's hardware limits, so about half the set cannot exist on a real
A100-40GB: it needs more compute slices (7), memory slices (8) or GPU instances of a profile than
the card has, even with every GPU instance filled to the last compute slice. Asserted here: a
configuration that such a count does not rule out applies, the GPU's MIG devices are exactly that
configuration (named as mig-parted reads them back), applying again changes nothing and
``mig assert`` passes; one that the count rules out is refused before the GPU is touched. The
count is this test's own (a necessary condition from the catalog's limits), independent of
gpuchain's placement search. The figures docs/mig.md states are asserted too.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from gpuchain.common.schema import validate
from gpuchain.gpu import catalog
from gpuchain.gpu.sim import SimBackend
from gpuchain.gpu.topology import Topology
from gpuchain.mig.apply import apply, check
from gpuchain.mig.config import LayoutError, parse_config

FIXTURE = Path(__file__).parent / "fixtures" / "mig-parted" / "a100-sxm4-40gb-possible-configs.json"
DOCS = Path(__file__).parents[3] / "docs" / "mig.md"
CONFIGS: list[dict[str, int]] = json.loads(FIXTURE.read_text())


def _as_mig_parted_file() -> str:
    """All of them as one mig-parted config file, one named layout each."""
    layouts = {
        f"case-{i}": [{"devices": "all", "mig-enabled": True, "mig-devices": cfg}] for i, cfg in enumerate(CONFIGS)
    }
    return yaml.safe_dump({"version": "v1", "mig-configs": layouts})


def _beyond_the_card(wanted: dict[str, int], gpu: catalog.GpuModel) -> bool:
    """Whether the configuration cannot exist on the card even packed perfectly: the fewest GPU
    instances of each profile (its compute instances' slices over its size, rounded up; a
    full-size one alone) need more compute or memory slices, or instances, than the card has."""
    slices: Counter[str] = Counter()
    whole: Counter[str] = Counter()
    for name, count in wanted.items():
        parsed = catalog.parse_profile(name)
        if parsed.splits_instance:
            slices[parsed.gpu_instance] += parsed.compute_slices * count
        else:
            whole[parsed.gpu_instance] += count
    instances = {gi: whole[gi] + math.ceil(slices[gi] / gpu.profile(gi).gi_slices) for gi in {*slices, *whole}}
    compute = sum(gpu.profile(gi).gi_slices * n for gi, n in instances.items())
    memory = sum(gpu.profile(gi).memory_slices * n for gi, n in instances.items())
    too_many = any(n > gpu.profile(gi).max_instances for gi, n in instances.items())
    return compute > gpu.compute_slices or memory > gpu.memory_slices or too_many


def test_every_configuration_mig_parted_tests_applies_unless_the_card_cannot_hold_it() -> None:
    cfg = parse_config(_as_mig_parted_file(), FIXTURE.name)
    sim = SimBackend(validate(Topology, {"node": "a100", "gpus": [{"model": "A100-40GB"}]}))
    gpu = catalog.model("A100-40GB")
    applied = applied_split = refused = 0
    for i, wanted in enumerate(CONFIGS):
        name = f"case-{i}"
        if _beyond_the_card(wanted, gpu):
            before = sim.inventory()
            with pytest.raises(LayoutError):
                apply(sim, config=cfg, name=name)
            assert sim.inventory() == before, name
            refused += 1
            continue
        apply(sim, config=cfg, name=name)
        got = Counter(m.profile for m in sim.inventory().gpu(0).mig_devices)
        assert got == wanted, name
        assert apply(sim, config=cfg, name=name).steps == (), f"{name} is not idempotent"
        assert check(sim, config=cfg, name=name) == []
        applied += 1
        applied_split += any(catalog.parse_profile(p).splits_instance for p in wanted)
    assert (len(CONFIGS), applied, applied_split, refused) == (754, 386, 343, 368)
    stated = re.search(r"<!-- ci-figures -->\s*(.*?)<!-- /ci-figures -->", DOCS.read_text(), flags=re.S)
    assert stated is not None, "docs/mig.md lost its compute-instance figures block"
    for figure in (f"{len(CONFIGS)} configurations", f"{applied} apply", f"{applied_split} of them", f"{refused} ask"):
        assert figure in stated.group(1), figure
