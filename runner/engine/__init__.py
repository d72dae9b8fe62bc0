"""engine layer (DESIGN §2)."""
