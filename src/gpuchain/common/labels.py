"""NVIDIA's node label and annotation names that more than one layer reads or writes.

These names are the contract between the operator, the MIG manager, the device plugin, the
doctor, remediation and the simulator (and with NVIDIA's own components, which use the same
spellings), so each is spelled once, here, below every layer that needs it.
"""

from __future__ import annotations

GPU_PRESENT = "nvidia.com/gpu.present"
"""``true`` on a node with NVIDIA GPUs (written by the operator, read to find GPU nodes)."""

DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
"""``nvidia.com/gpu.deploy.<operand>``: ``false`` opts a node out of that operand."""

OPERANDS_LABEL = DEPLOY_PREFIX + "operands"
"""``nvidia.com/gpu.deploy.operands=false`` opts a node out of every operand at once."""

PAUSED_FOR_MIG_CHANGE = "paused-for-mig-change"
"""The value the MIG manager gives a deploy label while it changes the layout (the operand stops)."""

MIG_CAPABLE = "nvidia.com/mig.capable"
"""``true`` on a node whose GPUs support MIG (GPU feature discovery writes it)."""

MIG_CONFIG = "nvidia.com/mig.config"
"""The named MIG layout a node should have (mig-parted's config name)."""

MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
"""How far the MIG manager got with ``nvidia.com/mig.config``: pending, success, failed, rebooting."""

MIG_CONFIG_STATE_REASON = "nvidia.com/mig.config.state.reason"
"""Annotation: why the last MIG change failed, in words."""

DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
"""The key of the device plugin's config map a node uses (per-node sharing/MIG settings)."""
