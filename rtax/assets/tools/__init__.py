"""Standalone tools copied into every environment (they import nothing of rtax)."""
