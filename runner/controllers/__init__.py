"""controllers layer (DESIGN §2)."""
