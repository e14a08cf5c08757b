"""The device plugin / GFD config file, compatible with NVIDIA's device plugin config v1.

NVIDIA keeps this vocabulary as its own package (``api/config/v1`` in k8s-device-plugin) because
the plugin, GFD and the config manager all read it; here the device plugin, feature discovery,
the exporter, the kubelet peer, the simulator and the node agent do. One module per concern,
imported by name (this package re-exports nothing):

- ``config``: the whole file (``Config``), ``parse_config``, and what NVIDIA's components do with
  it at start (``without_config_naming``, ``unsupported_settings``).
- ``flags``: ``flags`` with ``flags.plugin`` and ``flags.gfd``, and their strategy enums.
- ``resources``: resource names (``nvidia.com/...``) and ``resources.gpus``/``resources.mig``.
- ``replicas``: ``sharing.<kind>.resources[]`` and the device selectors they take.
- ``sharing``: ``sharing.timeSlicing`` and ``sharing.mps``.
- ``imex``: ``imex``; ``health``: gpuchain's own section (XID policy, recovery quiet period).
- ``durations``: Go durations (``sleepInterval``), parsed and written as NVIDIA's components do.
- ``environment``: the environment variables that override the file, and how they are read.
- ``load``: the file, then the environment, then resource naming, as a component starts.
- ``selection``: which key of a mounted multi-config ConfigMap applies to a node.
- ``section``: what every section shares.

Existing ConfigMaps written for NVIDIA's plugin load unchanged: same keys (``version``, ``flags``,
``resources``, ``sharing``, ``imex``), same defaults, same environment variables overriding the
file (precedence: environment, then file, then default). ``null`` means "not set", as in the JSON
NVIDIA's plugin logs at start ("Running with config"), so that JSON loads back. Unknown keys are
rejected so a typo fails start with the field path instead of being silently ignored.

The package sits right above ``gpu/`` (it reads the XID policy and the recovery quiet period from
there) and below every layer that reads the file.
"""
