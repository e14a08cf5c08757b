"""The table of NVIDIA's ClusterPolicy sections that docs/operator.md carries, built from compat.FEATURES."""

from __future__ import annotations

from gpuchain.operator.compat import FEATURES

LABELS = {"implemented": "implemented", "ignored": "accepted, ignored", "refused": "refused when on"}


def feature_table() -> str:
    """Markdown rows: key, what gpuchain does, what the key is, the note."""
    rows = ["| NVIDIA key | gpuchain | what | note |", "|---|---|---|---|"]
    for support in ("implemented", "ignored", "refused"):
        for f in FEATURES:
            if f.support == support:
                key = f.switch_key() if support == "refused" else f.key
                rows.append(f"| `{key}` | {LABELS[support]} | {f.what} | {f.note} |")
    return "\n".join(rows) + "\n"


def figures() -> str:
    """The compatibility figures, measured now against NVIDIA's files (docs/operator.md quotes them)."""
    from operator_compat_helpers import nvidia_spec_schema, published_policies, schema_paths

    from gpuchain.operator.crd import crd
    from gpuchain.operator.migrate import import_policy
    from gpuchain.operator.policy import ClusterPolicySpec, drop_nulls, parse_policy

    nvidia = schema_paths(nvidia_spec_schema())
    ours = set(schema_paths(crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]))
    known = sum(1 for p in nvidia if p in ours)
    lines = [
        f"- NVIDIA's ClusterPolicy schema: {known} of {len(nvidia)} property paths of `spec` are keys of "
        "gpuchain's ClusterPolicy and of its CRD.",
    ]
    policies = published_policies()
    as_is = []
    imported = []
    for name, doc in policies.items():
        parsed = parse_policy(drop_nulls(doc["spec"]))
        if isinstance(parsed, ClusterPolicySpec):
            as_is.append(f"{name}: renders")
        else:
            keys = ", ".join(f"`{p.field}`" for p in parsed)
            as_is.append(f"{name}: refused ({keys})")
        result = import_policy(doc)
        ok = isinstance(parse_policy(result.policy["spec"]), ClusterPolicySpec)
        blocks = ", ".join(f"`{e.key}`" for e in result.of("blocks")) or "none"
        imported.append(f"{name}: {'accepted' if ok else 'NOT accepted'}, blocking {blocks}")
    lines.append(f"- NVIDIA's {len(policies)} published ClusterPolicies as they are: " + "; ".join(as_is) + ".")
    lines.append("- The same through `gpuchain operator import`: " + "; ".join(imported) + ".")
    counts = {s: sum(1 for f in FEATURES if f.support == s) for s in LABELS}
    lines.append(
        f"- Sections and keys in the table: {counts['implemented']} implemented, {counts['ignored']} accepted and "
        f"ignored, {counts['refused']} refused when on."
    )
    return "\n".join(lines) + "\n"
