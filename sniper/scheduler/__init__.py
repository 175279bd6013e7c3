"""Pluggable task schedulers. Nothing is exported yet."""

__all__: list[str] = []
