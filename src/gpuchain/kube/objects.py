"""Pure helpers over Kubernetes JSON objects: accessors, JSON and strategic merge patch, the apply diff.

The apply rule lives here so both adapters share it: an applied object is merged onto the live
one as an RFC 7386 merge patch, and a write happens only when the desired fields are not
already a subset of the live object. "Subset" (rather than equality) tolerates the defaults an
API server fills in (imagePullPolicy, terminationMessagePath, ...), so a no-op reconcile against
a real cluster also makes zero writes.
"""

from __future__ import annotations

import marshal
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from gpuchain.kube.errors import InvalidError

Obj = dict[str, Any]
T = TypeVar("T")

#: Metadata the server owns; never part of an applied object's intent.
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")

#: The kubelet's pod condition that says whether the runtime created the pod's sandbox (kubernetes
#: pkg/kubelet/status/generate.go@v1.34.4 GeneratePodReadyToStartContainersCondition; on by default from 1.29,
#: gate PodReadyToStartContainersCondition): False while the pod has none.
READY_TO_START = "PodReadyToStartContainers"

#: Lists a strategic merge patch merges element by element, by path from the object root, with the
#: field that identifies an element. The real API takes these from the built-in types'
#: ``patchMergeKey`` tags; this is the subset gpuchain writes (Node and Pod conditions merge on type).
STRATEGIC_MERGE_KEYS: Mapping[tuple[str, ...], str] = {("status", "conditions"): "type"}


def json_copy(value: T) -> T:
    """Deep copy of a JSON tree (dicts, lists, scalars), several times faster than copy.deepcopy.

    marshal (format 2, which writes a shared subtree twice, so the copy shares nothing) does it
    in C; a tree holding something marshal cannot write is copied by the Python recursion.
    """
    try:
        return cast(T, marshal.loads(marshal.dumps(cast(Any, value), 2)))
    except ValueError:
        return cast(T, _json_copy(value))


def _json_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_copy(v) for v in value]
    return value


def name_of(obj: Obj) -> str:
    """metadata.name ("" when absent)."""
    return str(obj.get("metadata", {}).get("name", ""))


def created_of(obj: Obj) -> str:
    """metadata.creationTimestamp as RFC 3339 text ("" when absent), which sorts by time."""
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def namespace_of(obj: Obj) -> str | None:
    """metadata.namespace, or None for cluster-scoped objects."""
    ns = obj.get("metadata", {}).get("namespace")
    return str(ns) if ns else None


def is_ready(obj: Obj) -> bool:
    """Does the object's status hold condition Ready with status True (a pod's, or a node's)?"""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def labels_of(obj: Obj) -> dict[str, str]:
    """metadata.labels as a (possibly empty) dict."""
    return dict(obj.get("metadata", {}).get("labels") or {})


def annotations_of(obj: Obj) -> dict[str, str]:
    """metadata.annotations as a (possibly empty) dict."""
    return dict(obj.get("metadata", {}).get("annotations") or {})


def resource_version_of(obj: Obj) -> str | None:
    """metadata.resourceVersion, if the server set one."""
    rv = obj.get("metadata", {}).get("resourceVersion")
    return str(rv) if rv else None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge, ``None`` deletes a key, anything else replaces.

    Returns a new value; neither argument is modified. It is a strategic merge patch with no
    merge keys, so the two can never disagree on the common rules.
    """
    return strategic_merge_patch(target, patch=patch, merge_keys={})


def strategic_merge_patch(
    target: Any,
    *,
    patch: Any,
    merge_keys: Mapping[tuple[str, ...], str] = STRATEGIC_MERGE_KEYS,
    path: tuple[str, ...] = (),
) -> Any:
    """A strategic merge patch, as the API server applies one to a built-in kind.

    Like ``merge_patch``, except that a list at a path in ``merge_keys`` merges element-wise: a
    patch element replaces-by-merging the element with the same key value, or is appended; an
    element carrying ``"$patch": "delete"`` removes its match. So ``{"status": {"conditions":
    [{"type": "GPUHealthy", ...}]}}`` sets one condition and keeps every other writer's. Lists
    without a merge key replace, as in the API. Raises InvalidError for an element lacking its key.
    """
    if isinstance(patch, list) and path in merge_keys:
        return _merge_list(target if isinstance(target, list) else [], patch, merge_keys[path], path)
    if not isinstance(patch, dict):
        return json_copy(patch)
    result: dict[str, Any] = json_copy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), patch=value, merge_keys=merge_keys, path=(*path, key))
    return result


def _merge_list(current: list[Any], patch: list[Any], key: str, path: tuple[str, ...]) -> list[Any]:
    """``patch``'s elements merged into ``current`` by ``key`` (order kept, new ones appended)."""
    out = [json_copy(e) for e in current]
    for item in patch:
        if not isinstance(item, dict) or item.get(key) is None:
            raise InvalidError(f"{'.'.join(path)}: every element needs its merge key {key!r}; got {item!r}")
        index = next((i for i, e in enumerate(out) if isinstance(e, dict) and e.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append(merge_patch({}, item))
        else:
            out[index] = merge_patch(out[index], item)
    return out


def is_subset(desired: Any, live: Any) -> bool:
    """True when every field of ``desired`` is present in ``live`` with the same value.

    Lists compare element-wise (same length), so a removed container or toleration is a change;
    extra keys in ``live`` (server defaults, other writers' fields, status) are not. An empty list
    or map matches an absent key: the API server drops empty fields on write (``tolerations: []``
    reads back as no ``tolerations``), so without this every apply of one would write again.
    """
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        for key, value in desired.items():
            if value is None:
                if key in live:
                    return False
            elif value in ([], {}):
                if live.get(key) not in (None, [], {}):
                    return False
            elif key not in live or not is_subset(value, live[key]):
                return False
        return True
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return False
        return all(is_subset(d, v) for d, v in zip(desired, live, strict=True))
    return bool(desired == live)


def apply_intent(desired: Obj) -> Obj:
    """The part of an object that apply() writes: no status, no server-owned metadata."""
    intent = {k: json_copy(v) for k, v in desired.items() if k != "status"}
    meta = intent.get("metadata") or {}
    intent["metadata"] = {k: v for k, v in meta.items() if k not in SERVER_METADATA}
    return intent


def needs_apply(desired: Obj, live: Obj | None) -> bool:
    """Would applying ``desired`` onto ``live`` change anything (or create it)?"""
    return live is None or not is_subset(apply_intent(desired), live)


def diff_patch(old: Any, new: Any) -> Any:
    """The RFC 7386 merge patch that turns ``old`` into ``new`` ({} when they are equal).

    Keys missing from ``new`` become ``None`` (delete), so writing a whole computed document
    (a status) through a merge patch does not leave stale keys behind.
    """
    if not isinstance(old, dict) or not isinstance(new, dict):
        return json_copy(new)
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = json_copy(value)
        elif old[key] != value:
            if isinstance(old[key], dict) and isinstance(value, dict):
                patch[key] = diff_patch(old[key], value)
            else:
                patch[key] = json_copy(value)
    return patch
