//! The files around the broker agree with what it serves: every metric the
//! Prometheus rules (deploy/prometheus/rules.yaml) and the Grafana dashboard
//! (deploy/grafana/leasehold-dashboard.json) query exists in `/metrics`, the
//! README's "Metrics reference" table lists exactly the families the broker
//! serves, and its "Configuration reference" table exactly the flags,
//! environment variables and defaults of `leasehold serve --help`.

use leasehold_testkit as common;

use std::collections::BTreeSet;

use common::{must_acquire, scrape, Broker};
use leasehold_server::proto::ReleaseRequest;

/// The prefixes of Leasehold's own metric families.
const PREFIXES: [&str; 4] = ["lease_", "heartbeat_", "store_", "leasehold_"];

/// A file of the repository, by its path from the crate root.
fn repo_file(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {}: {e}", full.display()))
}

/// The metric family of a series name: histogram series lose their
/// `_bucket`/`_sum`/`_count` suffix.
fn family(name: &str) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            return base.to_owned();
        }
    }
    name.to_owned()
}

/// The metric families a PromQL expression names: identifiers starting with
/// one of [`PREFIXES`], outside string literals (so that a label value such
/// as `reason="store_lost"` is not taken for a metric).
fn metrics_in_expr(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut ident = String::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    // A trailing space flushes the last identifier.
    for c in expr.chars().chain(std::iter::once(' ')) {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            ident.push(c);
            continue;
        }
        // `$__rate_interval` and the like are Grafana variables, not metrics.
        let is_variable = c == '$';
        if !ident.is_empty() {
            if PREFIXES.iter().any(|p| ident.starts_with(p)) {
                names.insert(family(&ident));
            }
            ident.clear();
        }
        if c == '"' || c == '\'' || c == '`' {
            quote = Some(c);
        }
        if is_variable {
            // Skip the variable name by treating it as an identifier that
            // cannot match a prefix.
            ident.push('$');
        }
    }
    names
}

/// The `expr:` values of a Prometheus rules file (single-line values, and
/// `|`/`>` block scalars).
fn rule_exprs(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut exprs = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        i += 1;
        let Some(value) = trimmed.strip_prefix("expr:") else {
            continue;
        };
        let value = value.trim();
        if value.starts_with('|') || value.starts_with('>') {
            let indent = line.len() - trimmed.len();
            let mut block = String::new();
            while i < lines.len() {
                let next = lines[i];
                let next_indent = next.len() - next.trim_start().len();
                if !next.trim().is_empty() && next_indent <= indent {
                    break;
                }
                block.push_str(next.trim());
                block.push(' ');
                i += 1;
            }
            exprs.push(block);
        } else {
            // Strip YAML quoting of the whole value, if any.
            let value = value
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .unwrap_or(value);
            exprs.push(value.to_owned());
        }
    }
    exprs
}

/// The `"expr"` strings of a Grafana dashboard (JSON string unescaped).
fn dashboard_exprs(json: &str) -> Vec<String> {
    let mut exprs = Vec::new();
    let mut rest = json;
    while let Some(at) = rest.find("\"expr\"") {
        rest = &rest[at + "\"expr\"".len()..];
        let after_colon = rest
            .trim_start()
            .strip_prefix(':')
            .expect("\"expr\": value");
        let body = after_colon
            .trim_start()
            .strip_prefix('"')
            .expect("expr is a JSON string");
        let mut value = String::new();
        let mut chars = body.char_indices();
        let mut end = body.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, 't')) => value.push('\t'),
                    Some((_, other)) => value.push(other),
                    None => break,
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        exprs.push(value);
        rest = &body[end..];
    }
    exprs
}

/// The metric names of the README's "Metrics" table: the first backticked
/// name of each row, without its `{labels}`.
fn readme_metrics(readme: &str) -> BTreeSet<String> {
    let start = readme
        .find("\n## Metrics")
        .expect("a `## Metrics` section in README.md");
    let section = &readme[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    let mut names = BTreeSet::new();
    for line in section[..end].lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            continue;
        }
        let Some(open) = line.find('`') else { continue };
        let Some(len) = line[open + 1..].find('`') else {
            continue;
        };
        let name = &line[open + 1..open + 1 + len];
        let name = name.split('{').next().unwrap_or(name).trim();
        names.insert(name.to_owned());
    }
    names
}

/// The metric families a scrape serves (from its `# TYPE` lines).
fn served_families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// A broker's `/metrics` after one grant and one release.
async fn scrape_after_traffic() -> String {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "ecosystem", 10_000).await;
    client
        .release(ReleaseRequest {
            name: lease.name,
            owner_token: lease.owner_token,
        })
        .await
        .expect("release");
    let text = scrape(broker.metrics_addr).await;
    let _ = broker.stop().await;
    text
}

#[test]
fn the_scanners_find_metrics_and_skip_label_values() {
    let names = metrics_in_expr(
        r#"sum by (job) (increase(lease_lost_total{reason="store_lost"}[10m])) > 0
           and histogram_quantile(0.99, rate(heartbeat_latency_seconds_bucket[$__rate_interval]))"#,
    );
    let expected: BTreeSet<String> = ["lease_lost_total", "heartbeat_latency_seconds"]
        .map(String::from)
        .into();
    assert_eq!(names, expected);

    let yaml = "      - alert: A\n        expr: store_up == 0\n      - alert: B\n        expr: |\n          rate(store_errors_total[5m])\n            > 0\n        for: 1m\n";
    assert_eq!(rule_exprs(yaml).len(), 2);
    assert!(rule_exprs(yaml)[1].contains("store_errors_total"));

    let json = r#"{"targets": [{"expr": "sum(rate(lease_acquired_total{job=~\"$job\"}[5m]))", "refId": "A"}]}"#;
    assert_eq!(
        dashboard_exprs(json),
        vec![r#"sum(rate(lease_acquired_total{job=~"$job"}[5m]))"#.to_owned()]
    );
}

/// Every metric the alerts and the dashboard query is one the broker serves.
#[tokio::test]
async fn rules_and_dashboard_query_only_served_metrics() {
    let served = served_families(&scrape_after_traffic().await);

    let rules = rule_exprs(&repo_file("deploy/prometheus/rules.yaml"));
    assert!(
        rules.len() >= 5,
        "too few alert expressions found: {rules:?}"
    );
    let dashboard = dashboard_exprs(&repo_file("deploy/grafana/leasehold-dashboard.json"));
    assert!(
        dashboard.len() >= 10,
        "too few dashboard targets found: {dashboard:?}"
    );

    for (file, exprs) in [
        ("deploy/prometheus/rules.yaml", &rules),
        ("deploy/grafana/leasehold-dashboard.json", &dashboard),
    ] {
        let used: BTreeSet<String> = exprs.iter().flat_map(|e| metrics_in_expr(e)).collect();
        assert!(
            !used.is_empty(),
            "{file}: no Leasehold metric found in {exprs:?}"
        );
        let missing: Vec<&String> = used.difference(&served).collect();
        assert!(
            missing.is_empty(),
            "{file} queries metrics the broker does not serve: {missing:?}\nserved: {served:?}"
        );
    }
}

/// The README's "Metrics" table and `/metrics` list the same families.
#[tokio::test]
async fn readme_metrics_table_matches_what_is_served() {
    let served: BTreeSet<String> = served_families(&scrape_after_traffic().await)
        .into_iter()
        .filter(|name| PREFIXES.iter().any(|p| name.starts_with(p)))
        .collect();
    let documented = readme_metrics(&repo_file("README.md"));
    assert!(
        documented.len() >= 5,
        "too few rows parsed from README.md's Metrics table: {documented:?}"
    );

    let undocumented: Vec<&String> = served.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "served but missing from README.md's Metrics table: {undocumented:?}"
    );
    let not_served: Vec<&String> = documented.difference(&served).collect();
    assert!(
        not_served.is_empty(),
        "in README.md's Metrics table but not served: {not_served:?}"
    );
}

/// One flag of `leasehold serve`: its environment variable and default.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Flag {
    flag: String,
    env: String,
    default: String,
}

/// The flags `leasehold serve --help` documents (clap's long help: a
/// `--flag <VALUE>` line, then `[env: NAME=]` and `[default: X]` lines). A
/// switch without a default is "off".
fn help_flags(help: &str) -> BTreeSet<Flag> {
    let mut flags = BTreeSet::new();
    let mut current: Option<Flag> = None;
    for line in help.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("--") {
            flags.extend(current.take());
            let name = rest.split_whitespace().next().unwrap_or_default();
            if name != "help" {
                current = Some(Flag {
                    flag: format!("--{name}"),
                    env: String::new(),
                    default: "off".into(),
                });
            }
        } else if let Some(flag) = current.as_mut() {
            if let Some(env) = line.strip_prefix("[env: ") {
                flag.env = env.trim_end_matches(']').trim_end_matches('=').to_owned();
            } else if let Some(default) = line.strip_prefix("[default: ") {
                flag.default = default.trim_end_matches(']').to_owned();
            }
        }
    }
    flags.extend(current);
    flags
}

/// The rows of the README's "Configuration reference" table.
fn readme_flags(readme: &str) -> BTreeSet<Flag> {
    let section = readme
        .split("\n## Configuration reference")
        .nth(1)
        .expect("README has a Configuration reference section");
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter(|l| l.starts_with("| `--"))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let unquote = |c: &str| c.trim_matches('`').to_owned();
            Flag {
                flag: unquote(cells[1]),
                env: unquote(cells[2]),
                default: unquote(cells[3]),
            }
        })
        .collect()
}

/// The README's configuration reference lists every flag of `leasehold
/// serve`, with its environment variable and default, and nothing else.
#[test]
fn readme_configuration_table_matches_serve_help() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--help"])
        .output()
        .expect("run leasehold serve --help");
    assert!(output.status.success());
    let help = help_flags(&String::from_utf8_lossy(&output.stdout));
    assert!(help.len() > 10, "help parsed: {help:?}");
    let readme = readme_flags(&repo_file("README.md"));
    let missing: Vec<_> = help.difference(&readme).collect();
    let extra: Vec<_> = readme.difference(&help).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "README's configuration table and `leasehold serve --help` differ:\n  \
         in --help, not (or not so) in README: {missing:?}\n  \
         in README, not (or not so) in --help: {extra:?}"
    );
}
