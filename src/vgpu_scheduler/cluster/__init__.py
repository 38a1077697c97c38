"""The only code that talks to Kubernetes (or to the in-memory cluster that stands in for it)."""
