//! The crate graph is the architecture: the Rust client and the API's
//! definition compile no part of the broker, the broker's library knows no
//! client and no CLI, and the shipped binary carries no load generator.
//! Checked on what Cargo resolves (`cargo tree`), so a dependency added to
//! a crate, directly or through a feature, fails here; and, inside the
//! broker's library, on the modules' `crate::` paths.

use std::process::Command;

/// `cargo tree` of one workspace package, with features, one line per
/// package or feature.
fn tree(package: &str) -> String {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--locked", "-p", package, "-e", "normal,features"])
        .args(["--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Lines of `tree` naming one of `forbidden` (a package, or a package's
/// feature).
fn offending<'a>(tree: &'a str, forbidden: &[&str]) -> Vec<&'a str> {
    tree.lines()
        .filter(|line| forbidden.iter().any(|f| line.starts_with(f)))
        .collect()
}

/// What only the broker needs: itself, its store, its metrics, its HTTP
/// server, its flags, its certificate parsing.
const BROKER_ONLY: &[&str] = &[
    "leasehold v",
    "leasehold feature",
    "leasehold-server ",
    "redis ",
    "redis feature",
    "prometheus ",
    "prometheus feature",
    "clap ",
    "clap feature",
    "x509-parser ",
    "dashmap ",
    "axum ",
    "hyper feature \"server\"",
    "hyper-util feature \"server",
    "tonic feature \"server\"",
    "tonic feature \"router\"",
];

#[test]
fn the_client_compiles_no_part_of_the_broker() {
    let tree = tree("leasehold-client");
    assert!(tree.contains("leasehold-proto v"), "{tree}");
    let found = offending(&tree, BROKER_ONLY);
    assert!(found.is_empty(), "leasehold-client depends on {found:?}");
}

/// The API's definition needs no transport at all: a client brings its
/// own (the client crate: tonic's channel), the broker its server.
#[test]
fn the_proto_crate_depends_on_no_transport() {
    let tree = tree("leasehold-proto");
    let mut forbidden = BROKER_ONLY.to_vec();
    forbidden.extend(["leasehold-client ", "hyper ", "h2 ", "tokio-rustls "]);
    let found = offending(&tree, &forbidden);
    assert!(found.is_empty(), "leasehold-proto depends on {found:?}");
}

/// The broker's library serves; it is no client of Leasehold: it compiles
/// neither the client crate nor the load generators. (It is a client of its
/// stores: redis-rs, tokio-postgres, and tonic's channel for etcd, whose
/// API is gRPC.)
#[test]
fn the_broker_library_knows_no_client() {
    let tree = tree("leasehold-server");
    let found = offending(
        &tree,
        &["leasehold-client ", "leasehold-bench ", "leasehold v"],
    );
    assert!(found.is_empty(), "leasehold-server depends on {found:?}");
}

/// The load generators are not in the shipped binary: the `leasehold`
/// package does not depend on them.
#[test]
fn the_shipped_binary_carries_no_load_generator() {
    let tree = tree("leasehold");
    assert!(tree.contains("leasehold-server v"), "{tree}");
    let found = offending(&tree, &["leasehold-bench "]);
    assert!(found.is_empty(), "leasehold depends on {found:?}");
}

/// The modules of the broker's library (`server/src/`), in layers: each
/// may use the ones after it, never one before it. `duration`, `error` and
/// `redact` are leaves every layer may use (the error's secrets are
/// redacted); `proto` is the API's definition.
const LAYERS: &[&str] = &[
    "service", "metrics", "auth", "config", "lease", "store", "proto", "duration", "error",
    "redact",
];

/// The top-level modules the non-test code of each module of `src/` names
/// with `crate::` (in `use` lists, nested ones included, and in paths).
fn edges() -> Vec<(String, String)> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("server/src");
    let mut found = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&src).unwrap();
            let top = rel
                .iter()
                .next()
                .unwrap()
                .to_str()
                .unwrap()
                .trim_end_matches(".rs");
            if top == "lib" || top == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Tests may use anything.
            let code = text.split("#[cfg(test)]").next().unwrap();
            for used in crate_paths(code) {
                if used != top {
                    found.push((top.to_owned(), used));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// The first segment of every `crate::` path in `code`, comments left out:
/// `crate::a::b` and each item of `crate::{a, b::{c}}`.
fn crate_paths(code: &str) -> Vec<String> {
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(list) = rest.strip_prefix('{') {
            // Top-level items of the braced list.
            let (mut depth, mut start) = (0usize, 0usize);
            for (j, c) in list.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.push(ident(list[start..j].trim()));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident(list[start..j].trim()));
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident(rest));
        }
    }
    out.retain(|m| !m.is_empty() && m.chars().next().is_some_and(|c| c.is_ascii_lowercase()));
    out
}

/// No module uses one of a layer above it: the domain (lease, store) knows
/// no service, no metrics and no flags.
#[test]
fn no_module_uses_a_layer_above_it() {
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut wrong = Vec::new();
    for (from, to) in edges() {
        let (Some(a), Some(b)) = (rank(&from), rank(&to)) else {
            continue; // a module outside the layers (shutdown, fuzzing): checked by review
        };
        if b <= a {
            wrong.push(format!("{from} -> {to}"));
        }
    }
    assert!(wrong.is_empty(), "edges against the layering: {wrong:?}");
}

/// The scanner reads the forms `use` takes.
#[test]
fn crate_paths_are_read_in_every_form() {
    let code = "use crate::{error::{Error, Result}, lease::Caps};\nlet x = crate::store::open(); // crate::server\n";
    assert_eq!(crate_paths(code), ["error", "lease", "store"]);
}

/// The domain (the lease rules, the store, the error type) names no
/// transport, no metrics library and no flag parser: those crates appear
/// only in the service, metrics and config modules; and in the etcd store's
/// driver (`store/etcd/client.rs`), since etcd's own API is gRPC, as the
/// Redis store's speaks RESP through redis-rs.
#[test]
fn the_domain_names_no_transport_metrics_or_flags() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("server/src");
    let mut files = vec![root.join("error.rs")];
    let mut dirs = vec![root.join("lease"), root.join("store")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 10, "{files:?}");
    let mut found = Vec::new();
    for path in files {
        if path.ends_with("store/etcd/client.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for line in code.lines().map(|l| l.split("//").next().unwrap()) {
            for krate in ["tonic", "prometheus", "clap", "hyper", "http"] {
                if names_crate(line, krate) {
                    found.push(format!("{}: {}", path.display(), line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "the domain names {found:#?}");
}

/// Whether `line` has a path starting at the crate `krate` (`krate::...`,
/// not `my_krate::` nor `other::krate::`).
fn names_crate(line: &str, krate: &str) -> bool {
    line.match_indices(krate).any(|(i, _)| {
        let before = line[..i].chars().last();
        line[i + krate.len()..].starts_with("::")
            && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    })
}

#[test]
fn crate_names_are_told_from_lookalikes() {
    assert!(names_crate("use tonic::Status;", "tonic"));
    assert!(names_crate(
        "fn f(c: &prometheus::IntCounter)",
        "prometheus"
    ));
    assert!(names_crate("#[derive(clap::Args)]", "clap"));
    assert!(!names_crate("let t = monotonic::now();", "tonic"));
    assert!(!names_crate("use crate::http::Body;", "http"));
    assert!(!names_crate("use my_hyper::x;", "hyper"));
}
