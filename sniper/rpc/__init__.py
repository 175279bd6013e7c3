"""gRPC contract (``sniper.v1``) and the typed client. Nothing is exported yet."""

__all__: list[str] = []
