"""The embedded cluster's content and actors: demo fleets, snapshot files, the simulated device plugin.

Used by `vgpu-scheduler --cluster-snapshot` (server) and by `simulate`, so it sits below both.
"""
