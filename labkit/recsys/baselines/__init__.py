"""Anchors PICASSO is compared against (optional dependencies, imported lazily)."""
