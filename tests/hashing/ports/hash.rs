//! Independent Rust port of sniper's placement hashes (see sniper/_hashing.py for the contract).
//!
//! Built by tests/hashing/_ports.py with `rustc -O` and driven over stdin/stdout, one request
//! per line. Requests are buffered until an empty line, then answered in order, one line each:
//!
//! - `b <hex>`: string_to_u64 of the raw bytes `<hex>`
//! - `s <hex>`: `<hex>` must be UTF-8; it is decoded into a Rust `String` and hashed through
//!   `string_to_u64(&str)`, the way a Rust client would hash a variable name
//! - `h <sign> <num_shards>`: shard_of_sign, both decimal u64
//! - `f <variable hex> <value hex>`: feature_sign of the raw value bytes in the variable
//!
//! An answer is a decimal u64, or `e <message>` for a malformed request.

use std::io::{self, BufRead, Write};

const MUL1: u64 = 0xBF58_476D_1CE4_E5B9;
const MUL2: u64 = 0x94D0_49BB_1331_11EB;

/// h = 0; for each byte b: h = h * 31 + b, wrapping at 2**64.
fn bytes_to_u64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
}

/// The hash of a variable name: the polynomial over its UTF-8 bytes.
fn string_to_u64(name: &str) -> u64 {
    bytes_to_u64(name.as_bytes())
}

/// The splitmix64 finalizer (Steele, Lea and Flood, 2014).
fn splitmix64_mix(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(MUL1);
    z = (z ^ (z >> 27)).wrapping_mul(MUL2);
    z ^ (z >> 31)
}

/// The sign of a feature value: FNV-1a's byte step from the mixed hash of the variable's
/// name, then the finalizer.
fn feature_sign(variable: &[u8], value: &[u8]) -> u64 {
    let start = splitmix64_mix(bytes_to_u64(variable));
    let h = value.iter().fold(start, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    });
    splitmix64_mix(h)
}

fn shard_of_sign(sign: u64, num_shards: u64) -> Result<u64, String> {
    if num_shards == 0 {
        return Err("num_shards must be at least 1".to_string());
    }
    Ok(splitmix64_mix(sign) % num_shards)
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    if hex.len() % 2 != 0 {
        return Err(format!("odd-length hex {hex:?}"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("bad hex {hex:?}"))
        })
        .collect()
}

fn parse_u64(token: Option<&str>, what: &str) -> Result<u64, String> {
    let token = token.ok_or_else(|| format!("missing {what}"))?;
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} is not a decimal u64: {token:?}"));
    }
    token
        .parse::<u64>()
        .map_err(|e| format!("{what} {token:?}: {e}"))
}

fn answer(line: &str) -> Result<u64, String> {
    let (command, rest) = line.split_once(' ').unwrap_or((line, ""));
    match command {
        "b" => Ok(bytes_to_u64(&decode_hex(rest)?)),
        "s" => {
            let name = String::from_utf8(decode_hex(rest)?)
                .map_err(|e| format!("invalid UTF-8: {e}"))?;
            Ok(string_to_u64(&name))
        }
        "h" => {
            let mut fields = rest.split(' ');
            let sign = parse_u64(fields.next(), "sign")?;
            let num_shards = parse_u64(fields.next(), "num_shards")?;
            if fields.next().is_some() {
                return Err(format!("too many fields in {line:?}"));
            }
            shard_of_sign(sign, num_shards)
        }
        "f" => {
            let mut fields = rest.split(' ');
            let variable = decode_hex(fields.next().unwrap_or(""))?;
            let value = decode_hex(fields.next().ok_or("missing value")?)?;
            if fields.next().is_some() {
                return Err(format!("too many fields in {line:?}"));
            }
            Ok(feature_sign(&variable, &value))
        }
        _ => Err(format!("unknown command {command:?}")),
    }
}

fn main() -> io::Result<()> {
    let stdin = io::stdin();
    let mut stdout = io::stdout().lock();
    let mut pending = String::new();
    for line in stdin.lock().lines() {
        let line = line?;
        if line.is_empty() {
            stdout.write_all(pending.as_bytes())?;
            stdout.flush()?;
            pending.clear();
            continue;
        }
        match answer(&line) {
            Ok(value) => pending.push_str(&format!("{value}\n")),
            Err(message) => pending.push_str(&format!("e {message}\n")),
        }
    }
    Ok(())
}
