"""Generated ``sniper.v1`` messages, ``PsBase``/``HubBase`` services and ``PsStub``/``HubStub``."""

from sniper.rpc._generated.sniper.v1 import *  # noqa: F403
