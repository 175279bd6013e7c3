/*
 * The C port (hash.c) as a command: the hash line protocol on stdin/stdout, so that
 * `sniper conformance hash -- ./sniper_hash_c` checks the C port as it checks Rust and JS.
 *
 * Built by tests/hashing/_ports.py with `cc -O2 -o sniper_hash_c hash.c hash_main.c`.
 * Requests (see sniper/_contracts/_hash.py), one per line, answered in order once an empty
 * line ends the batch:
 *
 *   b <hex>                        sniper_string_to_u64 of the raw bytes
 *   s <hex>                        the same: a C client's string is its UTF-8 bytes
 *   h <sign> <num_shards>          sniper_shard_of_sign, both decimal u64
 *   f <variable hex> <value hex>   sniper_feature_sign of the raw bytes
 *
 * An answer is a decimal u64, or `e <message>` for a malformed request.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t sniper_string_to_u64(const unsigned char *bytes, size_t len);
uint64_t sniper_shard_of_sign(uint64_t sign, uint64_t num_shards);
uint64_t sniper_feature_sign(const unsigned char *variable, size_t variable_len,
                             const unsigned char *value, size_t value_len);

static int nibble(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes the `len` hex digits at `hex` into `out` (room for len / 2 bytes); -1 if malformed. */
static long decode_hex(const char *hex, size_t len, unsigned char *out) {
    if (len % 2 != 0) return -1;
    for (size_t i = 0; i < len; i += 2) {
        int high = nibble(hex[i]), low = nibble(hex[i + 1]);
        if (high < 0 || low < 0) return -1;
        out[i / 2] = (unsigned char)(high * 16 + low);
    }
    return (long)(len / 2);
}

/* A decimal u64 spanning all of `text`; 0 if it is not one. */
static int parse_u64(const char *text, uint64_t *out) {
    if (*text < '0' || *text > '9') return 0;
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0') return 0;
    *out = (uint64_t)value;
    return 1;
}

/* Answers one request line (its newline removed) on stdout. */
static void answer(char *line, size_t len, unsigned char *buffer) {
    char command = line[0];
    char *rest = len > 1 ? line + 2 : line + len;
    size_t rest_len = len > 1 ? len - 2 : 0;
    if (len > 1 && line[1] != ' ') {
        printf("e unknown request\n");
        return;
    }
    if (command == 'b' || command == 's') {
        long n = decode_hex(rest, rest_len, buffer);
        if (n < 0) printf("e bad hex\n");
        else printf("%" PRIu64 "\n", sniper_string_to_u64(buffer, (size_t)n));
    } else if (command == 'h') {
        char *space = strchr(rest, ' ');
        uint64_t sign, shards;
        if (space == NULL) {
            printf("e expected h <sign> <num_shards>\n");
            return;
        }
        *space = '\0';
        if (!parse_u64(rest, &sign) || !parse_u64(space + 1, &shards) || shards == 0) {
            printf("e bad sign or num_shards\n");
            return;
        }
        printf("%" PRIu64 "\n", sniper_shard_of_sign(sign, shards));
    } else if (command == 'f') {
        char *space = memchr(rest, ' ', rest_len);
        if (space == NULL) {
            printf("e expected f <variable hex> <value hex>\n");
            return;
        }
        size_t variable_len = (size_t)(space - rest);
        unsigned char *value = buffer + variable_len / 2 + 1;
        long n = decode_hex(rest, variable_len, buffer);
        long m = decode_hex(space + 1, rest_len - variable_len - 1, value);
        if (n < 0 || m < 0) printf("e bad hex\n");
        else printf("%" PRIu64 "\n", sniper_feature_sign(buffer, (size_t)n, value, (size_t)m));
    } else {
        printf("e unknown request\n");
    }
}

int main(void) {
    char *line = NULL;
    size_t capacity = 0;
    ssize_t read;
    unsigned char *buffer = NULL;
    size_t buffer_size = 0;
    while ((read = getline(&line, &capacity, stdin)) != -1) {
        size_t len = (size_t)read;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) {
            fflush(stdout);
            continue;
        }
        if (buffer_size < len + 2) {
            buffer_size = len + 2;
            buffer = realloc(buffer, buffer_size);
            if (buffer == NULL) {
                fprintf(stderr, "error: out of memory\n");
                return 1;
            }
        }
        answer(line, len, buffer);
    }
    free(buffer);
    free(line);
    return 0;
}
