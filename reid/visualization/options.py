"""Bounds of the pictures a user asks for, importable without OpenCV or matplotlib (``--help``)."""

MIN_TILE_HEIGHT = 32  # smaller labels cannot be read

__all__ = ["MIN_TILE_HEIGHT"]
