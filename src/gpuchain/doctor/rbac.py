"""The API server's words when RBAC refuses a request, as data: who asked, for which verb on which resource.

A refused request gets 403 Forbidden with the message ``User %q cannot %s resource %q in API group %q in the
namespace %q`` (``at the cluster scope`` for a cluster-wide one; the resource with its subresource after "/"),
kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go@v1.32.0 forbiddenMessage.
client-go's error quotes it whole and a component logs it, in logfmt with its quotes escaped. A ServiceAccount asks as
``system:serviceaccount:<namespace>:<name>``. The refusal names everything a grant needs, so the repair is the rule
it lacks, added for that account, whatever component was refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuchain.doctor.model import Fix, FixOp

FORBIDDEN = re.compile(
    r'User \\?"(?P<user>[^"\\]+)\\?" cannot (?P<verb>[a-z]+) resource \\?"(?P<resource>[^"\\]+)\\?" in API group '
    r'\\?"(?P<group>[^"\\]*)\\?"(?: in the namespace \\?"(?P<namespace>[^"\\]+)\\?"| (?P<cluster>at the cluster scope))'
)
ACCOUNT = "system:serviceaccount:"


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """One refused request: the user (a ServiceAccount's name as the API server spells it), the verb, the resource
    (with its subresource), its API group ("" for the core group) and the namespace ("" at the cluster scope)."""

    user: str
    verb: str
    resource: str
    group: str
    namespace: str

    @property
    def account(self) -> tuple[str, str] | None:
        """(namespace, name) of the ServiceAccount that asked, None for another kind of user."""
        if not self.user.startswith(ACCOUNT):
            return None
        ns, _, name = self.user.removeprefix(ACCOUNT).partition(":")
        return ns, name

    @property
    def qualified(self) -> str:
        """``resource.group`` as kubectl names it (the bare resource in the core group)."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    def describe(self) -> str:
        """The refusal in one line for evidence."""
        where = f"in namespace {self.namespace}" if self.namespace else "at the cluster scope"
        return f"RBAC refuses {self.user}: {self.verb} on {self.qualified} {where}"

    def grant(self) -> Fix | None:
        """The missing rule created for the refused ServiceAccount: a ClusterRole of its own with that verb on that
        resource, and its binding, so no role another release renders is edited (None for a user that is no
        ServiceAccount)."""
        account = self.account
        if account is None:
            return None
        ns, name = account
        role = f"{name}-{self.resource.replace('/', '-')}-{self.verb}"
        rule = {"apiGroups": [self.group], "resources": [self.resource], "verbs": [self.verb]}
        rbac = "rbac.authorization.k8s.io"
        items = [
            {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": {"name": role}, "rules": [rule]},
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
            },
        ]
        return Fix(FixOp.CREATE, "", {"apiVersion": "v1", "kind": "List", "items": items})


def refusal(text: str) -> Refusal | None:
    """The first RBAC refusal ``text`` quotes, None where it quotes none."""
    found = FORBIDDEN.search(text)
    if found is None:
        return None
    return Refusal(
        user=found["user"],
        verb=found["verb"],
        resource=found["resource"],
        group=found["group"],
        namespace=found["namespace"] or "",
    )
