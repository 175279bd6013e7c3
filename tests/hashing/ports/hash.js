// Independent JavaScript port of sniper's placement hashes (see sniper/_hashing.py for the
// contract). Needs Node.js 16 or newer (BigInt, a global TextDecoder, `node:` imports). Every
// u64 is a BigInt cut back to 64 bits with BigInt.asUintN(64, ...), since a Number loses
// precision above 2**53.
//
// Driven by tests/hashing/_ports.py over stdin/stdout, one request per line. Requests are
// buffered until an empty line, then answered in order, one line each:
//
//   b <hex>                 string_to_u64 of the raw bytes <hex>
//   s <hex>                 <hex> must be UTF-8; it is decoded into a JavaScript string (UTF-16)
//                           and hashed through stringToU64, which re-encodes it with
//                           TextEncoder, the way a JavaScript client would hash a variable name
//   h <sign> <num_shards>   shardOfSign, both decimal u64
//   f <var hex> <value hex> featureSign of the raw value bytes in the variable
//
// An answer is a decimal u64, or "e <message>" for a malformed request.
'use strict';

const readline = require('node:readline');

const U64_MAX = (1n << 64n) - 1n;
const MUL1 = 0xbf58476d1ce4e5b9n;
const MUL2 = 0x94d049bb133111ebn;

const encoder = new TextEncoder();
// ignoreBOM keeps a leading U+FEFF as part of the string instead of silently dropping it.
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

// h = 0; for each byte b: h = h * 31 + b (mod 2**64).
function bytesToU64(bytes) {
  let h = 0n;
  for (const b of bytes) {
    h = BigInt.asUintN(64, h * 31n + BigInt(b));
  }
  return h;
}

// The hash of a variable name: the polynomial over its UTF-8 bytes.
function stringToU64(name) {
  return bytesToU64(encoder.encode(name));
}

// The splitmix64 finalizer (Steele, Lea and Flood, 2014).
function splitmix64Mix(x) {
  let z = BigInt.asUintN(64, x);
  z = BigInt.asUintN(64, (z ^ (z >> 30n)) * MUL1);
  z = BigInt.asUintN(64, (z ^ (z >> 27n)) * MUL2);
  return z ^ (z >> 31n);
}

// The sign of a feature value: FNV-1a's byte step from the mixed hash of the variable's name,
// then the finalizer.
function featureSign(variable, value) {
  let h = splitmix64Mix(bytesToU64(variable));
  for (const b of value) {
    h = BigInt.asUintN(64, (h ^ BigInt(b)) * 0x100000001b3n);
  }
  return splitmix64Mix(h);
}

function shardOfSign(sign, numShards) {
  if (numShards < 1n) {
    throw new Error('num_shards must be at least 1');
  }
  return splitmix64Mix(sign) % numShards;
}

function decodeHex(hex) {
  if (!/^(?:[0-9a-fA-F]{2})*$/.test(hex)) {
    throw new Error(`bad hex ${JSON.stringify(hex)}`);
  }
  return Buffer.from(hex, 'hex');
}

function parseU64(token, what) {
  if (token === undefined || !/^[0-9]+$/.test(token)) {
    throw new Error(`${what} is not a decimal u64: ${JSON.stringify(token)}`);
  }
  const value = BigInt(token);
  if (value > U64_MAX) {
    throw new Error(`${what} ${token} does not fit in 64 bits`);
  }
  return value;
}

function answer(line) {
  const space = line.indexOf(' ');
  const command = space < 0 ? line : line.slice(0, space);
  const rest = space < 0 ? '' : line.slice(space + 1);
  switch (command) {
    case 'b':
      return bytesToU64(decodeHex(rest));
    case 's':
      return stringToU64(decoder.decode(decodeHex(rest)));
    case 'h': {
      const fields = rest.split(' ');
      if (fields.length !== 2) {
        throw new Error(`expected 'h <sign> <num_shards>', got ${JSON.stringify(line)}`);
      }
      return shardOfSign(parseU64(fields[0], 'sign'), parseU64(fields[1], 'num_shards'));
    }
    case 'f': {
      const fields = rest.split(' ');
      if (fields.length !== 2) {
        throw new Error(`expected 'f <variable hex> <value hex>', got ${JSON.stringify(line)}`);
      }
      return featureSign(decodeHex(fields[0]), decodeHex(fields[1]));
    }
    default:
      throw new Error(`unknown command ${JSON.stringify(command)}`);
  }
}

let pending = [];
const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on('line', (line) => {
  if (line === '') {
    process.stdout.write(pending.join(''));
    pending = [];
    return;
  }
  try {
    pending.push(`${answer(line)}\n`);
  } catch (err) {
    pending.push(`e ${err.message}\n`);
  }
});
