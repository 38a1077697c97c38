"""`vgpu-scheduler certs`: the admission webhook's self-signed TLS Secret and caBundle."""
