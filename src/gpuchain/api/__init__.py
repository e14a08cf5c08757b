"""gpuchain's public, versioned vocabularies: what more than one layer reads and users write."""
