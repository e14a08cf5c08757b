"""The node agent: the node side of the chain (device plugin, feature discovery, exporter,
gpu-health, MIG manager, DRA plugin, validator) as roles that one process or one each can serve.

- ``settings``: one dataclass per role and one for what the roles share (``NodeSettings``); the
  commands only parse flags (and NVIDIA's environment switches) into them.
- ``build``: the one place that turns a role's settings into the role that runs.
- ``node``: what the roles of one process share: one GPU backend with one health event stream
  fanned out (``fanout``), one Node watch, one pod-resources client, one metrics endpoint.
- ``supervisor``: the node agent's supervision tree: a role that fails is logged and restarted
  alone with backoff while the others keep serving; repeated failure is a metric and a log line.
- ``runtime``: stop signals, the settled heap, the NVML release board's follower: what any
  long-running agent does around its start-up.

Layer: above every node link (``deviceplugin``, ``discovery``, ``exporter``, ``mig``,
``remediation``, ``dra``, ``validator``) and ``kube``; only ``commands`` is above it. Role modules
are imported when a role is built, so an agent loads only what its roles use.
"""
