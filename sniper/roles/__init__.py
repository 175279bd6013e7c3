"""The hub, ps and trainer roles. Nothing is exported yet."""

__all__: list[str] = []
