"""Per-link checks run as init containers, and the ready files that gate the next link.

``gpuchain validate driver|toolkit|cuda|plugin`` runs one check and, on success, writes
``/run/gpuchain/validations/<link>-ready``; ``gpuchain validate wait <link>`` blocks until that file
exists. The operator's DaemonSets chain them, so each link starts only when the one below works.
"""

from gpuchain.validator.checks import CheckResult, check_cuda, check_driver, check_plugin, check_toolkit
from gpuchain.validator.ready import LINKS, ReadyFiles

__all__ = ["LINKS", "CheckResult", "ReadyFiles", "check_cuda", "check_driver", "check_plugin", "check_toolkit"]
