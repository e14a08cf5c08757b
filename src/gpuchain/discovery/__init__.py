"""GPU feature discovery: NVIDIA GFD-compatible node labels, written as an NFD feature file or
patched onto the Node.

``labels`` computes the labels (pure), ``output`` writes them (feature file, node labels) and
``service`` runs the discover-and-write loop.
"""
