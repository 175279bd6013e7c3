"""Generated ``sniper.v1`` messages, ``PsBase``/``HubBase`` services and ``PsStub``/``HubStub``.

Exactly what the generated module defines is public here: the helpers it imports itself
(``dataclass``, typing names) are not re-exported.
"""

from sniper.rpc._generated.sniper import v1 as _generated
from sniper.rpc._generated.sniper.v1 import *  # noqa: F403

__all__ = [
    name
    for name, value in sorted(vars(_generated).items())
    if not name.startswith("_") and getattr(value, "__module__", None) == _generated.__name__
]
for _name in [name for name in dir() if not name.startswith("_") and name not in __all__]:
    del globals()[_name]
