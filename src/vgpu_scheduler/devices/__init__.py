"""Device backends: one protocol (`protocol`), a shared base (`base`), one module per vendor, and
the registry that builds the registered set from the device configuration (`registry`).

The engine imports `devices.protocol` only; vendors never import the engine. See docs/vendors.md.
"""
