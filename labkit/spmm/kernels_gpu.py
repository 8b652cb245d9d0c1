"""GPU Tiled-CSL SpMM (placeholder replaced below)."""


def available() -> bool:
    return False
