"""NVIDIA's device plugin / GPU feature discovery config file, one subpackage per version."""
