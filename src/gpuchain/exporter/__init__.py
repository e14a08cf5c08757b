"""Prometheus exporter with dcgm-exporter's metric names and labels, and pod attribution.

``counters`` reads the collectors CSV, ``metrics`` turns a sample into families (pure),
``podresources`` asks the kubelet who holds which device, ``collector`` samples in the
background and ``server`` answers ``/metrics`` and ``/health``.
"""
