"""The scenarios, one module per subject; importing this package registers them, in this order
(the order they run in on each machine)."""

# ruff: noqa: I001, F401
from scenarios import service
from scenarios import readers
from scenarios import loadcredential
from scenarios import desktop
from scenarios import examples
from scenarios import audit
from scenarios import upgrade
