"""Placement hashes shared by every sniper role and by clients in other languages.

See :mod:`sniper._hashing` for the definitions; ``tests/data/hash_vectors.json`` holds
known-answer vectors that a port in another language can check itself against.
"""

from sniper._hashing import feature_sign as feature_sign
from sniper._hashing import feature_signs as feature_signs
from sniper._hashing import ps_for_variable as ps_for_variable
from sniper._hashing import shard_of as shard_of
from sniper._hashing import shard_of_sign as shard_of_sign
from sniper._hashing import splitmix64_mix as splitmix64_mix
from sniper._hashing import string_to_u64 as string_to_u64
from sniper._hashing import strings_to_u64 as strings_to_u64

__all__ = [
    "feature_sign",
    "feature_signs",
    "ps_for_variable",
    "shard_of",
    "shard_of_sign",
    "splitmix64_mix",
    "string_to_u64",
    "strings_to_u64",
]
