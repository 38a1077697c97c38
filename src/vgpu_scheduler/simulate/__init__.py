"""A kube-scheduler-shaped loop over the embedded cluster."""
