//! The `--auth-file` parser, fed any bytes (the file is written by people,
//! and a token may sit in any field by mistake).
//!
//! Asserts what `server/src/auth.rs` promises: any bytes give credentials or an
//! error naming a line that exists, never a panic; an error quotes nothing
//! of the file (its text after `line N: ` is one of the parser's fixed
//! messages, digits aside); a file that parses grants exactly what its lines
//! say, looked up as the broker looks a caller up.

#![no_main]

use std::{collections::HashSet, sync::OnceLock};

use leasehold_server::{
    auth::{hash_token, Grant},
    fuzzing,
    lease::Permissions,
};
use libfuzzer_sys::fuzz_target;

/// `line N: ` taken off, runs of digits made one `#`.
fn shape(message: &str) -> Option<(usize, String)> {
    let rest = message.strip_prefix("line ")?;
    let (n, text) = rest.split_once(": ")?;
    let mut shaped = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !shaped.ends_with('#') {
                shaped.push('#');
            }
        } else {
            shaped.push(c);
        }
    }
    Some((n.parse().ok()?, shaped))
}

/// The parser's messages, taken from the parser itself on one bad file of
/// each kind (so that rewording a message needs no change here; a new kind
/// of error does, which is the point).
fn fixed_messages() -> &'static HashSet<String> {
    static MESSAGES: OnceLock<HashSet<String>> = OnceLock::new();
    MESSAGES.get_or_init(|| {
        let hash = format!("token:sha256:{}", "ab".repeat(32));
        let bad: [&[u8]; 11] = [
            b"a use",
            b"a b c d",
            b"a/b use anonymous",
            b"a read anonymous",
            b"a use token:sha256:abc",
            b"a use lh_0123",
            b"a use anonymous\nb use anonymous",
            b"a use cert:x\nb use cert:x",
            b"a use cert:",
            b"\xff",
            format!("a use {hash}\nb use {hash}").leak().as_bytes(),
        ];
        bad.iter()
            .map(|file| {
                let e = fuzzing::auth_file(file).expect_err("a bad file parses");
                shape(&e).expect("an error names its line").1
            })
            .collect()
    })
}

fn unhex(hex: &str) -> [u8; 32] {
    let mut hash = [0u8; 32];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex");
    }
    hash
}

fuzz_target!(|bytes: &[u8]| {
    let messages = fixed_messages();
    let auth = match fuzzing::auth_file(bytes) {
        Err(e) => {
            let (line, text) = shape(&e).unwrap_or_else(|| panic!("no line named: {e:?}"));
            let lines = bytes.iter().filter(|&&b| b == b'\n').count() + 1;
            assert!((1..=lines).contains(&line), "line {line} of {lines}: {e:?}");
            assert!(messages.contains(&text), "not a fixed message: {e:?}");
            return;
        }
        Ok(auth) => auth,
    };
    // Parsed, so UTF-8; read it again the simple way and ask the broker's
    // lookup about every line.
    let text = std::str::from_utf8(bytes).expect("a file that parses is UTF-8");
    let mut hashes = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let [tenant, permissions, credential] = fields[..] else {
            panic!("a line of {} fields parsed: {line:?}", fields.len());
        };
        let perms: Vec<&str> = permissions.split(',').collect();
        assert!(
            perms.iter().all(|p| matches!(*p, "use" | "admin")),
            "{line:?}"
        );
        let want = Grant {
            tenant: tenant.to_owned(),
            permissions: Permissions {
                use_locks: perms.contains(&"use"),
                admin: perms.contains(&"admin"),
            },
        };
        let got = if credential == "anonymous" {
            auth.authenticate(None, &[])
        } else if let Some(hex) = credential.strip_prefix("token:sha256:") {
            assert!(
                hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
                "{line:?}"
            );
            let hash = unhex(hex);
            hashes.push(hash);
            auth.authenticate_hashed(Some(&hash), &[])
        } else if let Some(name) = credential.strip_prefix("cert:") {
            // One line per name: a repeated name is refused.
            auth.authenticate(None, &[name.to_owned()])
        } else {
            panic!("an unknown credential parsed: {line:?}");
        };
        assert_eq!(got.ok(), Some(want), "{line:?}");
    }
    // A token the file does not list is refused, anonymous line or not.
    let stranger = hash_token("lh_not_in_any_file");
    if !hashes.contains(&stranger) {
        assert!(auth.authenticate_hashed(Some(&stranger), &[]).is_err());
    }
});
