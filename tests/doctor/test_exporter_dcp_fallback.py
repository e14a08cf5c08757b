"""dcgm-exporter's fallback without profiling metrics is information, not its failure (catalog.yaml
dcgm-exporter.dcp-not-collected, dcgm.module-not-loaded).

Fixtures: the exporter's own line, "Not collecting DCP metrics: <DCGM's error>", at info level where DCGM serves no
profiling module (NVIDIA/dcgm-exporter pkg/cmd/app.go@3.3.8-3.6.0: logrus.Info; the later klog and slog releases
write it as "not collecting DCP metrics: %v" and "Not collecting DCP metrics: " + err); DCGM's error text from
NVIDIA/go-dcgm pkg/dcgm/dcgm_structs.h@v0.0.0-20240118201113-3385e277e49f. The fatal variant is the same DCGM error
returned where the exporter does not fall back (a field watch that fails), worded as this test's own.
"""

from __future__ import annotations

import pytest

from gpuchain.doctor import catalog

DCGM = "This request is serviced by a module of DCGM that is not currently loaded"


@pytest.mark.parametrize(
    "line",
    [
        f'time="2025-02-11T08:30:00Z" level=info msg="Not collecting DCP metrics: {DCGM}"',
        f"W0211 08:30:00.000000       1 app.go:301] not collecting DCP metrics: {DCGM}",
    ],
)
def test_the_exporters_fallback_is_no_error(line: str) -> None:
    """Two releases' wordings (logrus, klog): no entry above info level claims the line, the info entry knows it."""
    assert catalog.known_error(line + "\n") is None
    found = catalog.find(line, "dcgm-exporter.dcp-not-collected")
    assert found is not None and found.entry.level == "info"


def test_dcgms_error_outside_the_fallback_stays_the_exporters_failure() -> None:
    text = f'time="2025-02-11T08:30:00Z" level=fatal msg="Failed to watch metrics: {DCGM}"\n'
    found = catalog.known_error(text)
    assert found is not None and found.entry.id == "dcgm.module-not-loaded"
