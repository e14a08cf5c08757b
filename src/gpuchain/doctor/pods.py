"""Pure readers of pod and node status: the shapes kubectl shows, turned into answers."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from gpuchain.common.remember import remembered
from gpuchain.kube.objects import READY_TO_START, Obj

#: Waiting reasons that mean a container is failing, not just starting (the kubelet's and the CRI's
#: words: kubernetes pkg/kubelet/images and kuberuntime, containerd's StartError for a task the OCI
#: runtime or its prestart hook refused to create).
FAILING = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "StartError",
        "Error",
    }
)
#: Terminated reasons (with a non-zero exit code) that mean the container failed.
FAILED_TERMINATION = frozenset({"Error", "StartError", "OOMKilled", "ContainerCannotRun", "DeadlineExceeded"})


@dataclass(frozen=True, kw_only=True, slots=True)
class PodState:
    """A pod in one line, like the STATUS column of ``kubectl get pods`` (plus the details)."""

    name: str
    status: str  #: Running, CrashLoopBackOff, Init:0/1, ContainerCreating, Pending ...
    ready: bool
    failing: bool
    container: str = ""  #: the container the status is about
    restarts: int = 0
    last_log: str = ""  #: lastState.terminated.message (the last log lines with FallbackToLogsOnError)
    waiting_init: str = ""  #: the init container it is blocked in, if any
    message: str = ""  #: the failing container's waiting message (``Back-off pulling image "..."``)
    unschedulable: bool = False  #: Pending because the scheduler cannot place it (``message`` says why)
    namespace: str = ""  #: the pod's own namespace: a fix that deletes it names this, not the stack's

    def restart_in(self, fallback: str) -> str:
        """The namespace a delete of this pod names: its own, else ``fallback`` (a pod with none set)."""
        return self.namespace or fallback

    def describe(self) -> str:
        """``name: status (container, N restarts)`` for evidence lines."""
        extra = [self.container] if self.container else []
        if self.restarts:
            extra.append(f"{self.restarts} restarts")
        return f"pod {self.name}: {self.status}" + (f" ({', '.join(extra)})" if extra else "")


def _statuses(pod: Obj, key: str) -> list[dict[str, Any]]:
    return list((pod.get("status") or {}).get(key) or [])


@remembered
def pod_state(pod: Obj) -> PodState:
    """Summarise a pod the way kubectl does: failing container first, then init progress, then readiness.

    It runs once for each of a diagnosis's pods (70,000 at 10,000 nodes: `remembered`), so it reads
    each container status once, in one pass over the init containers and one over the others, and
    builds one answer with its namespace."""
    meta = pod.get("metadata", {})
    name = str(meta.get("name", "?"))
    namespace = str(meta.get("namespace") or "")  # namespace_of's, read from the metadata at hand
    status = pod.get("status") or {}
    inits = status.get("initContainerStatuses") or ()
    mains = status.get("containerStatuses") or ()
    if not inits and not mains:
        # The scheduler's word decides only for a pod with no container statuses yet.
        unschedulable = unschedulable_message(pod)
        if unschedulable is not None:
            return PodState(
                name=name,
                status="Pending",
                ready=False,
                failing=True,
                message=unschedulable,
                unschedulable=True,
                namespace=namespace,
            )
    done, blocked = 0, None  # init containers finished with exit code 0; the first one not finished
    for cs in inits:
        state = cs.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and not waiting and terminated.get("exitCode") == 0:
            done += 1  # finished (most of them): no failure _failed could name, its exit code is 0
            continue
        # A running container has neither of the states _failed reads.
        failed = _failed(cs, state, name, namespace) if terminated or waiting else None
        if failed is not None:
            return failed
        if terminated and terminated.get("exitCode") == 0:
            done += 1
        elif blocked is None and not terminated:
            blocked = cs
    ready, restarts, creating = bool(mains), 0, None
    for cs in mains:
        state = cs.get("state") or {}
        waiting = state.get("waiting")
        failed = _failed(cs, state, name, namespace) if waiting or state.get("terminated") else None
        if failed is not None:
            return failed
        ready = ready and bool(cs.get("ready"))
        restarts += int(cs.get("restartCount") or 0)
        if creating is None and waiting and waiting.get("reason") == "ContainerCreating":
            creating = cs
    if inits and done < len(inits):
        blocked = blocked if blocked is not None else inits[done]
        return PodState(
            name=name,
            status=f"Init:{done}/{len(inits)}",
            ready=False,
            failing=False,
            container=str(blocked.get("name")),
            waiting_init=str(blocked.get("name")),
            namespace=namespace,
        )
    if creating is not None:
        return PodState(
            name=name,
            status="ContainerCreating",
            ready=False,
            failing=False,
            container=str(creating.get("name")),
            namespace=namespace,
        )
    phase = str(status.get("phase", "Unknown"))
    shown = phase if ready or phase != "Running" else "Running (not ready)"
    return _settled(name, shown, ready, restarts, namespace)


def _settled(name: str, status: str, ready: bool, restarts: int, namespace: str) -> PodState:
    """``PodState(name=.., status=.., ready=.., failing=False, restarts=.., namespace=..)``, the answer for
    most pods, built by setting its slots directly: a frozen dataclass's ``__init__`` sets each of its
    eleven fields through ``object.__setattr__``, 3.5 us a pod, 70,000 times a diagnosis at 10,000 nodes
    (bench.doctor.live); this takes a third of that and builds the same frozen value."""
    state = _NEW(PodState)
    _NAME(state, name)
    _STATUS(state, status)
    _READY(state, ready)
    _FAILING(state, False)
    _CONTAINER(state, "")
    _RESTARTS(state, restarts)
    _LAST_LOG(state, "")
    _WAITING_INIT(state, "")
    _MESSAGE(state, "")
    _UNSCHEDULABLE(state, False)
    _NAMESPACE(state, namespace)
    return state


_NEW = object.__new__
#: PodState's slot setters in field order, for `_settled` (a field added to PodState fails here, at import).
(
    _NAME,
    _STATUS,
    _READY,
    _FAILING,
    _CONTAINER,
    _RESTARTS,
    _LAST_LOG,
    _WAITING_INIT,
    _MESSAGE,
    _UNSCHEDULABLE,
    _NAMESPACE,
) = (vars(PodState)[f.name].__set__ for f in fields(PodState))
assert [f.name for f in fields(PodState)] == [
    "name",
    "status",
    "ready",
    "failing",
    "container",
    "restarts",
    "last_log",
    "waiting_init",
    "message",
    "unschedulable",
    "namespace",
], "PodState's fields changed: set each of them in _settled"


def _failed(cs: dict[str, Any], state: dict[str, Any], name: str, namespace: str) -> PodState | None:
    """The pod's state when container status ``cs`` (whose ``state`` is given) shows a failure: it
    terminated with a failing reason and a non-zero exit code, or waits for a failing reason."""
    terminated = state.get("terminated")
    if terminated and terminated.get("reason") in FAILED_TERMINATION and terminated.get("exitCode") not in (0, None):
        return PodState(
            name=name,
            status=str(terminated["reason"]),
            ready=False,
            failing=True,
            container=str(cs.get("name")),
            restarts=int(cs.get("restartCount") or 0),
            last_log=str(terminated.get("message") or ""),
            namespace=namespace,
        )
    waiting = state.get("waiting")
    if waiting and waiting.get("reason") in FAILING:
        last = ((cs.get("lastState") or {}).get("terminated") or {}).get("message", "")
        return PodState(
            name=name,
            status=str(waiting["reason"]),
            ready=False,
            failing=True,
            container=str(cs.get("name")),
            restarts=int(cs.get("restartCount") or 0),
            last_log=str(last),
            message=str(waiting.get("message") or ""),
            namespace=namespace,
        )
    return None


#: The container states in which the runtime refused to create or start a container (the kubelet's and
#: containerd's reasons: kuberuntime RunContainerError / CreateContainerError, containerd StartError).
NOT_CREATED = frozenset({"StartError", "RunContainerError", "CreateContainerError", "ContainerCannotRun"})


def start_refused(pod: Obj) -> str:
    """The runtime's message for a container of ``pod`` it refused to start ("" when none was refused)."""
    for cs in _statuses(pod, "containerStatuses"):
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            for phase in ("terminated", "waiting"):
                said = state.get(phase) or {}
                if said.get("reason") in NOT_CREATED and said.get("message"):
                    return str(said["message"])
    return ""


def init_done(pod: Obj | None, container: str) -> bool:
    """Did init container ``container`` finish successfully (a validator's ready file was written)?"""
    if pod is None:
        return False
    for cs in _statuses(pod, "initContainerStatuses"):
        if cs.get("name") == container:
            return ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") == 0
    return False


def unschedulable_message(pod: Obj) -> str | None:
    """The scheduler's message when the pod is Pending as Unschedulable."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return str(cond.get("message", ""))
    return None


def sandbox_created(pod: Obj) -> bool | None:
    """Has the runtime created ``pod``'s sandbox: False where the kubelet's PodReadyToStartContainers condition says
    not; True where it says so, or a container of the pod has run (none runs outside a sandbox); None where neither
    says (a kubelet before 1.29 shows a pod without a sandbox only as its containers' default waiting reasons,
    ContainerCreating, or PodInitializing for a pod with init containers: pkg/kubelet/kubelet_pods.go
    convertToAPIContainerStatuses@v1.34.4, the same as while images are pulled)."""
    said = _sandbox_condition(pod)
    if said is not None:
        return said
    for key in ("initContainerStatuses", "containerStatuses"):
        if any(container_ran(cs) for cs in _statuses(pod, key)):
            return True
    return None


def lacks_sandbox(pod: Obj) -> bool:
    """Does the kubelet say ``pod`` has no sandbox (``sandbox_created(pod) is False``): its PodReadyToStartContainers
    condition alone, so a check that asks it of every operand pod of every node (bench.doctor.live) never reads
    their container statuses."""
    return _sandbox_condition(pod) is False


def _sandbox_condition(pod: Obj) -> bool | None:
    """What the kubelet's PodReadyToStartContainers condition says of ``pod``'s sandbox; None where it writes none."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == READY_TO_START:
            return bool(cond.get("status") == "True")
    return None


def container_ran(cs: Obj) -> bool:
    """Has the runtime ever run this container (a container status): it is not waiting, or it has a last state or a
    restart. One that never ran waits with the kubelet's default reason, or the reason it could not be created."""
    return "waiting" not in (cs.get("state") or {"waiting": {}}) or bool(cs.get("lastState") or cs.get("restartCount"))


def running_since(cs: Obj) -> str:
    """When this container's current run started (a container status; RFC 3339, "" where it is not running)."""
    return str(((cs.get("state") or {}).get("running") or {}).get("startedAt") or "")


def first_running(pod: Obj | None) -> tuple[str, str]:
    """The first of ``pod``'s containers that runs and says since when, and that time; ("", "") where none does."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if started := running_since(cs):
            return str(cs.get("name")), started
    return "", ""
