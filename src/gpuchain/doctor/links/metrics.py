"""dcgm-exporter asking DCGM for fields this GPU does not serve: the metrics CSV it reads, less those fields.

dcgm-exporter watches every field of its metrics CSV (``-f`` / DCGM_EXPORTER_COLLECTORS, by default the image's own
file; with NVIDIA's operator a ConfigMap named by spec.dcgmExporter.config.name, key dcgm-metrics.csv) as one field
group, and exits when DCGM refuses the group: "Profiling is not supported for this group of GPUs or GPU" where the
GPU has no profiling (DCP) support at all, "Feature not supported" (DCGM_ST_NOT_SUPPORTED) where one profiling field
is not served by this architecture (FP64 pipe activity on GPUs without FP64 units, tensor pipe activity by data type
on the ones that do not count it), "This request is serviced by a module of DCGM that is not currently loaded" where
DCGM's profiling module is absent (NVIDIA/go-dcgm pkg/dcgm/dcgm_structs.h). The fields DCGM serves only where the GPU
supports them are the profiling ones, DCGM_FI_PROF_* (dcgm_fields.h, 1001 and up): removing them from the CSV the
exporter reads, and starting it again, repairs it; which of them the GPU lacks DCGM does not say.
"""

from __future__ import annotations

import re

from gpuchain.doctor.catalog import Match
from gpuchain.doctor.context import Context
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.pods import PodState
from gpuchain.kube.objects import Obj, namespace_of
from gpuchain.operator.operands import METRICS_CONFIG_KEY

#: A profiling field's line of a dcgm-exporter CSV: ``DCGM_FI_PROF_<NAME>, <type>, <help>`` (comments start with #).
PROFILING = re.compile(r"^\s*(DCGM_FI_PROF_\w+)\s*,", re.MULTILINE)
#: A CSV dcgm-exporter reads: lines that name DCGM fields.
FIELD_LINE = re.compile(r"^\s*DCGM_FI_\w+\s*,", re.MULTILINE)


def _metrics_configmap(ctx: Context, pod: Obj) -> tuple[str, str, str]:
    """The ConfigMap (name, key, its CSV) the exporter pod reads its fields from: a configMap volume of the pod whose
    data in the snapshot is a DCGM field list, else the one the policy names; ("", "", "") when it reads none."""
    volumes = ((pod.get("spec") or {}).get("volumes")) or []
    mounted = [str((v.get("configMap") or {}).get("name")) for v in volumes if v.get("configMap")]
    named = ctx.policy.dcgm_exporter.config.name if ctx.policy_obj is not None else ""
    for name in [*mounted, *([named] if named else [])]:
        data = ctx.configmaps.get(name) or {}
        key = next((k for k, v in sorted(data.items()) if FIELD_LINE.search(v or "")), "")
        if key:
            return name, key, data[key]
    return (named, METRICS_CONFIG_KEY, "") if named else ("", "", "")


def unsupported_fields(ctx: Context, *, pod: Obj, state: PodState, found: Match) -> Known:
    """The repair of an exporter DCGM refuses fields for: the profiling fields taken out of the CSV it reads (the
    ConfigMap rewritten without them, named where the snapshot holds it), then the pod started again."""
    ns = namespace_of(pod) or ctx.namespace
    name, key, csv = _metrics_configmap(ctx, pod)
    fields = sorted(set(PROFILING.findall(csv)))
    drop = "|".join(fields) if fields else "DCGM_FI_PROF_[A-Z0-9_]+"
    restart = f"kubectl -n {ns} delete pod {state.name}"
    cause = (
        "dcgm-exporter asks DCGM to watch fields this GPU does not serve (profiling fields, DCGM_FI_PROF_*, that its "
        "architecture lacks), DCGM refuses the whole field group, and the exporter exits."
    )
    evidence = (
        *found.evidence(),
        f"metrics CSV: ConfigMap {ns}/{name}, key {key}" if name else "metrics CSV: the image's own file (-f)",
        f"profiling fields in it: {', '.join(fields)}" if fields else "",
    )
    if name:
        path = key.replace(".", "\\.")
        fix = (
            f"kubectl -n {ns} get configmap {name} -o jsonpath='{{.data.{path}}}' | grep -v -E '^ *({drop}) *,' "
            f"> metrics.csv && kubectl -n {ns} create configmap {name} --from-file={key}=metrics.csv --dry-run=client "
            f"-o yaml | kubectl replace -f - && {restart}   # the CSV without the profiling fields this GPU does not "
            "serve; the DCGM_FI_DEV_* lines stay"
        )
    else:
        where = f"spec.dcgmExporter.config.name in {ctx.policy_ref}" if ctx.policy_obj is not None else "its DaemonSet"
        fix = (
            "# remove the unsupported fields (the profiling fields, DCGM_FI_PROF_*, this GPU does not serve) from the "
            f"metrics CSV the exporter reads: a ConfigMap with key {METRICS_CONFIG_KEY} (the image's "
            "default-counters.csv less those lines) named by "
            f"{where} (a configMap volume and DCGM_EXPORTER_COLLECTORS=/etc/dcgm-exporter/{METRICS_CONFIG_KEY} on "
            f"a DaemonSet of its own); then {restart}"
        )
    return Known(cause=cause, evidence=tuple(e for e in evidence if e), action=None, fix=fix)
