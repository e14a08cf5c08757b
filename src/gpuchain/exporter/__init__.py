"""Prometheus exporter with dcgm-exporter's metric names and labels, and pod attribution.

``counters`` reads the collectors CSV, ``metrics`` turns a sample into families (pure),
``podresources`` asks the kubelet who holds which device, ``collector`` samples in the
background and ``server`` answers ``/metrics`` and ``/health``.
"""

COLLECT_INTERVAL = 30.0
"""Seconds between two collections unless ``--collect-interval`` says otherwise: the pace at which
``gpuchain_gpu_last_sample_timestamp_seconds`` moves while a GPU answers. Here, with no imports,
because readers of a scrape (the doctor) judge a sample's age by it too."""
