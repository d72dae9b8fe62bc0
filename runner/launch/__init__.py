"""launch layer (DESIGN §2)."""
