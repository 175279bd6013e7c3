/*
 * Independent C port of sniper's placement hashes (see sniper/_hashing.py for the contract).
 *
 * Built by tests/hashing/_ports.py with `cc -O2 -shared -fPIC` and called through ctypes.
 * All arithmetic is on uint64_t, whose overflow is defined by the C standard to wrap modulo
 * 2**64, which is exactly the contract.
 */
#include <stddef.h>
#include <stdint.h>

/* h = 0; for each byte b: h = h * 31 + b (mod 2**64). The bytes are the UTF-8 encoding. */
uint64_t sniper_string_to_u64(const unsigned char *bytes, size_t len) {
    uint64_t h = 0;
    for (size_t i = 0; i < len; ++i) {
        h = h * UINT64_C(31) + (uint64_t)bytes[i];
    }
    return h;
}

/* The splitmix64 finalizer (Steele, Lea and Flood, 2014). */
static uint64_t splitmix64_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Shard of one sign. num_shards must be at least 1; 0 returns UINT64_MAX instead of trapping. */
uint64_t sniper_shard_of_sign(uint64_t sign, uint64_t num_shards) {
    if (num_shards == 0) {
        return UINT64_MAX;
    }
    return splitmix64_mix(sign) % num_shards;
}

/* The sign of a feature value: FNV-1a's byte step from the mixed hash of the variable's name,
 * then the finalizer. The value is a string's UTF-8 bytes or an integer's decimal text. */
uint64_t sniper_feature_sign(const unsigned char *variable, size_t variable_len,
                             const unsigned char *value, size_t value_len) {
    uint64_t h = splitmix64_mix(sniper_string_to_u64(variable, variable_len));
    for (size_t i = 0; i < value_len; ++i) {
        h = (h ^ (uint64_t)value[i]) * UINT64_C(0x100000001B3);
    }
    return splitmix64_mix(h);
}
