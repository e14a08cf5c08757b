"""One module per role; each has ``run(settings, node, stop, started)``, built by ``agent.build``.

A role's ``run`` serves until ``stop`` is set, then cleans up (sockets, feature files) and
returns; it calls ``started()`` once it serves (the device plugin: registered with the kubelet).
Anything it raises is a failure of the role: a separate agent exits, the node agent restarts it.
"""
