"""vgpu-scheduler: a Python drop-in for HAMi's scheduler extender and admission webhook."""

__version__ = "0.1.0"
