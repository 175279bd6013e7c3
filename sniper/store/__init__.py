"""Embedding tables for one ps process. Nothing is exported yet."""

__all__: list[str] = []
