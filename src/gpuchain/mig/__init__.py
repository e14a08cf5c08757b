"""MIG manager: mig-parted compatible layouts, apply/assert on a GPU backend, and the node agent
that walks ``nvidia.com/mig.config`` -> ``nvidia.com/mig.config.state``."""
