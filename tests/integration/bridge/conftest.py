"""The bridge fixtures live in bridge_world.py: test folders share sys.path, so a
conftest is no module to import names from."""

from bridge_world import project

__all__ = ["project"]
