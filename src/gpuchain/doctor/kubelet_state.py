"""The kubelet's own state files: a checkpoint it cannot read stops it at start, and its own message names the file.

The kubelet keeps per-node state in checkpoint files under its root directory (/var/lib/kubelet): the pod resource
allocations (pod_status_manager_state), the CPU manager's (cpu_manager_state) and the memory manager's
(memory_manager_state). When one is corrupt (a torn write at a power loss, an edit by hand) or disagrees with the
kubelet's configuration (a changed CPU manager policy), the kubelet refuses to start with the same words from each
manager: "could not restore state from checkpoint: <why>, please drain this node and delete <which> checkpoint file
"<path>" before restarting Kubelet" (kubernetes/kubernetes pkg/kubelet/status/state/state_checkpoint.go@v1.32.0,
pkg/kubelet/cm/cpumanager/state/state_checkpoint.go@v1.34.4, pkg/kubelet/cm/memorymanager/state/state_checkpoint.go
@v1.34.4). A restart of the kubelet alone meets the same file again; the repair is the one the message gives. The
line reaches the cluster in a Node Event (a node-problem monitor's systemd log watcher) or the Ready condition's
message, which is where the doctor reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuchain.doctor.context import NodeView

#: The kubelet's refusal to start over a checkpoint it cannot restore, with the file it names (Go's %q: quoted, the
#: quotes escaped again where the line is itself quoted in a JSON or klog message).
CHECKPOINT = re.compile(
    r"could not restore state from checkpoint: (?P<why>.*?),? please drain this node and delete (?:the )?"
    r"(?P<what>[\w ]*?) ?checkpoint file \\*\"(?P<path>[^\"\\]+)\\*\" before restarting Kubelet",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class BadCheckpoint:
    """A checkpoint the kubelet refuses at start: which manager's, the file, and where the doctor read it."""

    what: str  #: "pod allocation", "CPU manager", "memory manager"
    path: str
    said: str  #: the evidence line: where it was read, and the kubelet's words

    def work(self, node: str) -> str:
        """The kubelet's own instruction, as commands: the node drained (its pods are about to lose the state the
        file held), the file removed, the kubelet started, so it writes a fresh checkpoint."""
        return (
            f"kubectl drain {node} --ignore-daemonsets --delete-emptydir-data, then on the node delete the kubelet's "
            f"{self.what} checkpoint it cannot read (rm {self.path}) and systemctl restart kubelet; kubectl uncordon "
            f"{node} once it is Ready"
        )


def bad_checkpoint(view: NodeView) -> BadCheckpoint | None:
    """The checkpoint the kubelet on ``view``'s node says it cannot restore: from the node's Events (newest
    first), then its conditions' messages; None when nothing on the node says so."""
    events = sorted(
        (e for e in view.events if (e.get("involvedObject") or {}).get("kind") == "Node"),
        key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""),
        reverse=True,
    )
    said = [(f"event {e.get('reason')}", str(e.get("message") or "")) for e in events]
    conditions = (view.node.get("status") or {}).get("conditions") or []
    said += [(f"condition {c.get('type')}", str(c.get("message") or "")) for c in conditions]
    for where, message in said:
        found = CHECKPOINT.search(message)
        if found is not None:
            what = found.group("what").strip() or "state"
            return BadCheckpoint(what, found.group("path"), f"{where}: {message}")
    return None
