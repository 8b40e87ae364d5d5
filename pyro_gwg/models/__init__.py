"""Target models."""
