"""`vgpu-scheduler explain`: why a pod is pending or where it went, from a snapshot or a cluster."""
