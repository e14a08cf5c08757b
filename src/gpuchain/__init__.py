"""gpuchain: the Kubernetes GPU chain, link by link, with a doctor, remediation, a planner and a simulator."""

__version__ = "0.1.0"
