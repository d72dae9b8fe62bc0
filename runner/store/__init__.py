"""store layer (DESIGN §2)."""
