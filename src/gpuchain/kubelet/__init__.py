"""A faithful kubelet-side peer (device manager, Registration, pod-resources API): test double and simulator engine."""
