"""host layer (DESIGN §2)."""
