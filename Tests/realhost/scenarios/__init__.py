"""The scenarios, one module per subject; importing this package registers them in order."""

from scenarios import desktop, examples, readers, service, upgrade  # noqa: F401
