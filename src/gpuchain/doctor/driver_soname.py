"""A driver library a component cannot find by its SONAME, in each component's own words.

The driver's user-space libraries are files named for the driver's version (libnvidia-ml.so.550.54.15); the name
the components load or look up is the SONAME (libnvidia-ml.so.1, libcuda.so.1), a link that ldconfig creates beside
the versioned file. Where that link is missing (or the library is not installed at all), every component that needs
NVML says so, each in its own words:

- NVIDIA's DRA kubelet plugin looks the library up under its driver root: ``error locating "libnvidia-ml.so.1"``
  (NVIDIA/k8s-dra-driver-gpu nvml DriverRoot.findFile, wrapped by nvlib.go newDeviceLib);
- nvidia-container-cli (the runtime hook) dlopen()s it in the driver root: ``load library failed: <glibc's dlerror>``
  (NVIDIA/libnvidia-container src/xfuncs.h xdlopen);
- go-nvlib's platform probe in the device plugin, GFD and nvidia-ctk: ``could not load NVML library: <dlerror>``
  (NVIDIA/go-nvlib pkg/nvlib/info/property-extractor.go, vendored by NVIDIA/k8s-device-plugin@v0.17.1);
- go-nvml's loader: ``error opening libnvidia-ml.so.1: <dlerror>`` (NVIDIA/go-nvml pkg/nvml/lib.go, vendored by
  NVIDIA/nvidia-container-toolkit@v1.17.4);
- the toolkit's CDI generator: ``Ignoring error in locating libnvidia-ml.so.1: %v`` (NVIDIA/nvidia-container-toolkit
  pkg/nvcdi/lib.go@v1.17.4).

glibc's dlerror for a name found nowhere is ``<name>: cannot open shared object file: No such file or directory``.
`unlocated` reads any of these wordings, so a check that repairs the missing link does not depend on which
component happened to say it. The toolkit's own helper (libnvidia-container-go.so.1) is not a driver library and
is left out: its repair is the toolkit's packages (catalog: libnvidia-container.go-helper-missing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A driver library's SONAME: libnvidia-<name>.so.<n> (not the toolkit's libnvidia-container*), libcuda.so.<n>.
_LIB = r"(?P<lib>lib(?:nvidia-(?!container)[\w-]+|cuda)\.so\.\d+)"

#: The components' words for a driver library not found by that name (module docstring), most specific first.
WORDINGS: tuple[re.Pattern[str], ...] = (
    re.compile(rf'error locating \\?"{_LIB}\\?"'),
    re.compile(rf"error in locating {_LIB}\b"),
    re.compile(rf"{_LIB}: cannot open shared object file: no such file or directory", re.IGNORECASE),
)


@dataclass(frozen=True)
class Unlocated:
    """The driver library a component did not find by its SONAME, and the words it said so in."""

    lib: str  #: the SONAME looked for (libnvidia-ml.so.1)
    said: str  #: the matched words, for the finding's evidence


def unlocated(log: str) -> Unlocated | None:
    """The driver library ``log`` says its component cannot find by its SONAME (in any component's wording), or None."""
    for wording in WORDINGS:
        found = wording.search(log)
        if found is not None:
            return Unlocated(lib=found["lib"], said=found.group(0))
    return None
