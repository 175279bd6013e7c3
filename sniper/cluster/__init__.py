"""Running sniper as a cluster: the model spec that says how each variable's table is built.

``sniper train`` reads ``[variables]`` from its TOML into a :class:`ModelSpec`, learns the
variables, their signs per batch and the dense feature count from the data
(:class:`DataShape`), and resolves one sized :class:`TableSpec` per variable before it starts
any process, so that a spec that does not fit the data fails at once, with the key named.
"""

from sniper.cluster._spec import DataShape as DataShape
from sniper.cluster._spec import ModelSpec as ModelSpec
from sniper.cluster._spec import TableSpec as TableSpec

__all__ = ["DataShape", "ModelSpec", "TableSpec"]
