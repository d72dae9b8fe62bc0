"""The real-Pi fixtures live in pi_world.py: test folders share sys.path, so a
conftest is no module to import names from."""

from pi_world import world

__all__ = ["world"]
