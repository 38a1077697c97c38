"""The stand-in Kubernetes API server and the embedded cluster: what lets the scheduler and the
simulator run with no cluster at all. `memory` is the in-memory API server (objects, watches,
faults), `fakeapi` serves it over HTTP, `transport` lets a client call it without sockets, and
`embedded` seeds it from a snapshot and runs the device-plugin stand-in beside it."""
