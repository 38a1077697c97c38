"""The scheduler process without HTTP: the options, the extender verbs (bytes in, bytes out) and the
composition of informers, registration, node lock, events and verbs that the server and the
simulator share."""
