"""sniper: a Python parameter server for CTR models with huge sparse embedding tables.

Roles (hub, ps, trainer) talk gRPC; a ps keeps embedding tables in :mod:`sniper.store` and runs
each variable's work on a pluggable :mod:`sniper.scheduler`. Placement of variables on ps and of
signs on shards is defined in :mod:`sniper.hashing`.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
