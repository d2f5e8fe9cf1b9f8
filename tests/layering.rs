//! The crate graph is the architecture: the Rust client and the API's
//! definition compile no part of the broker. Checked on what Cargo resolves
//! (`cargo tree`), so a dependency added to either crate, directly or
//! through a feature, fails here.

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
