//! The files around the broker agree with what it serves: every metric the
//! Prometheus rules (deploy/prometheus/rules.yaml) and the Grafana dashboard
//! (deploy/grafana/leasehold-dashboard.json) query exists in `/metrics`, every
//! recorded series they query is recorded by the rules (and every recording
//! is used), every selector of the rules is scoped to job="leasehold",
//! docs/operations.md's "Metrics reference" table lists exactly the families
//! the broker serves, docs/configuration.md's "Configuration reference"
//! table exactly the flags, environment variables and defaults of
//! `leasehold serve --help`, and docs/stores.md's table of stores exactly
//! the `--store` values `Store::open` accepts (`store::SCHEMES`). And the
//! docs hold together: README.md stays short (at most [`README_MAX_LINES`]
//! lines), and every relative link of README.md, CONTRIBUTING.md and
//! docs/*.md reaches a file that exists, and a heading of it for an
//! `#anchor`.

use leasehold_testkit as common;

use std::collections::BTreeSet;

use common::{must_acquire, scrape, Broker};
use leasehold_server::proto::ReleaseRequest;

/// The prefixes of the metric families the broker serves: its own (the
/// `leasehold_` namespace and the three names kept from before it) and the
/// process collector's.
const PREFIXES: [&str; 4] = ["lease_", "heartbeat_", "leasehold_", "process_"];

/// The job every rule selects (deploy/README.md, "Alerts").
const JOB: &str = r#"job="leasehold""#;

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

/// An identifier of a PromQL expression outside string literals, with what
/// follows it (to read its selector).
fn identifiers(expr: &str) -> Vec<(String, &str)> {
    let mut found = Vec::new();
    let mut start: Option<usize> = None;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut variable = false;
    for (i, c) in expr
        .char_indices()
        .chain(std::iter::once((expr.len(), ' ')))
    {
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
            start.get_or_insert(i);
            continue;
        }
        if let Some(s) = start.take() {
            // `$__rate_interval`, `$job`: Grafana variables, not metrics.
            if !variable {
                found.push((expr[s..i].to_owned(), &expr[i..]));
            }
        }
        variable = c == '$';
        if c == '"' || c == '\'' || c == '`' {
            quote = Some(c);
        }
    }
    found
}

/// The metric families a PromQL expression names: identifiers starting with
/// one of [`PREFIXES`], outside string literals (so that a label value such
/// as `reason="store_lost"` is not taken for a metric). Recorded series
/// (with a `:`) are not served: see [`recorded_in_expr`].
fn metrics_in_expr(expr: &str) -> BTreeSet<String> {
    identifiers(expr)
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !name.contains(':') && PREFIXES.iter().any(|p| name.starts_with(p)))
        .map(|name| family(&name))
        .collect()
}

/// The recorded series (`level:metric:operations`) an expression queries.
fn recorded_in_expr(expr: &str) -> BTreeSet<String> {
    identifiers(expr)
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name.contains(':') && !name.starts_with(|c: char| c.is_ascii_digit()))
        .collect()
}

/// The `record:` names of a Prometheus rules file.
fn recorded_names(yaml: &str) -> BTreeSet<String> {
    yaml.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- record:"))
        .map(|name| name.trim().to_owned())
        .collect()
}

/// The series selectors of an expression (metrics, recorded series, `up`)
/// that do not select [`JOB`].
fn unscoped_selectors(expr: &str) -> Vec<String> {
    identifiers(expr)
        .into_iter()
        .filter(|(name, _)| {
            name == "up" || name.contains(':') || PREFIXES.iter().any(|p| name.starts_with(p))
        })
        .filter(|(_, rest)| {
            let selector = rest
                .strip_prefix('{')
                .and_then(|r| r.split_once('}'))
                .map(|(labels, _)| labels);
            !selector.is_some_and(|labels| labels.split(',').any(|l| l.trim() == JOB))
        })
        .map(|(name, _)| name)
        .collect()
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

/// The page whose "Metrics reference" section has the metrics table.
const METRICS_DOC: &str = "docs/operations.md";

/// The page whose "Configuration reference" section has the flags table.
const CONFIGURATION_DOC: &str = "docs/configuration.md";

/// The page whose marked table lists the stores.
const STORES_DOC: &str = "docs/stores.md";

/// README.md's length, at most: the README says what Leasehold is and
/// how to start; the rest is in docs/.
const README_MAX_LINES: usize = 250;

/// The section of a Markdown page under the heading `## {title}` (to the
/// next `## ` heading); panics, naming the page, when there is none.
fn section<'a>(page: &'a str, path: &str, title: &str) -> &'a str {
    let heading = format!("\n## {title}\n");
    let start = page
        .find(&heading)
        .unwrap_or_else(|| panic!("{path} has no `## {title}` section"))
        + heading.len();
    let rest = &page[start..];
    rest.find("\n## ").map_or(rest, |end| &rest[..end])
}

/// The metric names of the "Metrics reference" table: the first
/// backticked name of each row, without its `{labels}`.
fn documented_metrics(page: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in section(page, METRICS_DOC, "Metrics reference").lines() {
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
    // The census gauges are labelled: they are served once the first
    // census (at start-up) set them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let text = loop {
        let text = scrape(broker.metrics_addr).await;
        if text.contains("leasehold_store_leases_held{") {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no census within 10 s:\n{text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
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

    let yaml = "      - alert: A\n        expr: leasehold_store_up == 0\n      - alert: B\n        expr: |\n          rate(leasehold_store_errors_total[5m])\n            > 0\n        for: 1m\n";
    assert_eq!(rule_exprs(yaml).len(), 2);
    assert!(rule_exprs(yaml)[1].contains("leasehold_store_errors_total"));

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

/// The recorded series the dashboard and the alerts query are recorded by
/// rules.yaml, and every recording is queried by one of them (or by another
/// recording).
#[test]
fn recorded_series_are_recorded_and_used() {
    let rules_file = repo_file("deploy/prometheus/rules.yaml");
    let recorded = recorded_names(&rules_file);
    assert!(recorded.len() >= 5, "too few recording rules: {recorded:?}");
    let rules = rule_exprs(&rules_file);
    let dashboard = dashboard_exprs(&repo_file("deploy/grafana/leasehold-dashboard.json"));
    let dashboard_uses: BTreeSet<String> =
        dashboard.iter().flat_map(|e| recorded_in_expr(e)).collect();
    assert!(
        dashboard_uses.len() >= 5,
        "the dashboard queries too few recorded series: {dashboard_uses:?}"
    );
    let used: BTreeSet<String> = rules
        .iter()
        .chain(&dashboard)
        .flat_map(|e| recorded_in_expr(e))
        .collect();
    let missing: Vec<&String> = used.difference(&recorded).collect();
    assert!(
        missing.is_empty(),
        "queried but recorded by no rule of deploy/prometheus/rules.yaml: {missing:?}"
    );
    let unused: Vec<&String> = recorded.difference(&used).collect();
    assert!(unused.is_empty(), "recorded but never queried: {unused:?}");
}

/// Every selector of every rule names the job, so that no rule matches
/// another exporter's series in a shared Prometheus.
#[test]
fn every_rule_selector_is_scoped_to_the_job() {
    let rules = rule_exprs(&repo_file("deploy/prometheus/rules.yaml"));
    assert!(rules.len() >= 5, "too few expressions found: {rules:?}");
    for expr in &rules {
        let unscoped = unscoped_selectors(expr);
        assert!(unscoped.is_empty(), "{unscoped:?} without {JOB} in: {expr}");
    }
    // The scanner itself: it sees an unscoped selector, and a scoped one.
    assert_eq!(
        unscoped_selectors(r#"rate(lease_lost_total{reason="x"}[5m]) + up{job="leasehold"}"#),
        vec!["lease_lost_total".to_owned()]
    );
    assert_eq!(
        unscoped_selectors(r#"a:b:rate5m{job="leasehold", reason!="revoked"} > 0"#),
        Vec::<String>::new()
    );
    assert_eq!(
        unscoped_selectors("sum by (job) (leasehold_store_up)"),
        vec!["leasehold_store_up".to_owned()]
    );
}

/// deploy/README.md's alert table lists exactly the alerts of rules.yaml,
/// each with its runbook section, and names every recorded series.
#[test]
fn deploy_readme_lists_every_rule() {
    let rules = repo_file("deploy/prometheus/rules.yaml");
    let readme = repo_file("deploy/README.md");
    let alerts: BTreeSet<String> = rules
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- alert:"))
        .map(|name| name.trim().to_owned())
        .collect();
    assert!(alerts.len() >= 5, "too few alerts parsed: {alerts:?}");
    let table: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `Leasehold"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| format!("Leasehold{name}"))
        .collect();
    assert_eq!(
        alerts, table,
        "rules.yaml's alerts against deploy/README.md's table"
    );
    for alert in &alerts {
        assert!(
            readme.contains(&format!("\n### {alert}\n")),
            "deploy/README.md has no runbook section ### {alert}"
        );
    }
    for record in recorded_names(&rules) {
        assert!(
            readme.contains(&format!("`{record}`")),
            "deploy/README.md does not name the recorded series {record}"
        );
    }
}

/// docs/operations.md's "Metrics reference" table and `/metrics` list the
/// same families.
#[tokio::test]
async fn metrics_reference_matches_what_is_served() {
    let served: BTreeSet<String> = served_families(&scrape_after_traffic().await)
        .into_iter()
        .filter(|name| PREFIXES.iter().any(|p| name.starts_with(p)))
        .collect();
    let documented = documented_metrics(&repo_file(METRICS_DOC));
    assert!(
        documented.len() >= 5,
        "too few rows parsed from {METRICS_DOC}'s Metrics reference table: {documented:?}"
    );

    let undocumented: Vec<&String> = served.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "served but missing from {METRICS_DOC}'s Metrics reference table: {undocumented:?}"
    );
    let not_served: Vec<&String> = documented.difference(&served).collect();
    assert!(
        not_served.is_empty(),
        "in {METRICS_DOC}'s Metrics reference table but not served: {not_served:?}"
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

/// The rows of the "Configuration reference" table.
fn documented_flags(page: &str) -> BTreeSet<Flag> {
    section(page, CONFIGURATION_DOC, "Configuration reference")
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

/// docs/configuration.md's reference lists every flag of `leasehold
/// serve`, with its environment variable and default, and nothing else.
#[test]
fn configuration_reference_matches_serve_help() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--help"])
        .output()
        .expect("run leasehold serve --help");
    assert!(output.status.success());
    let help = help_flags(&String::from_utf8_lossy(&output.stdout));
    assert!(help.len() > 10, "help parsed: {help:?}");
    let documented = documented_flags(&repo_file(CONFIGURATION_DOC));
    let missing: Vec<_> = help.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&help).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{CONFIGURATION_DOC}'s configuration table and `leasehold serve --help` differ:\n  \
         in --help, not (or not so) in the table: {missing:?}\n  \
         in the table, not (or not so) in --help: {extra:?}"
    );
}

/// The marks around docs/stores.md's table of stores.
const STORES_BEGIN: &str = "<!-- store-schemes: begin";
const STORES_END: &str = "<!-- store-schemes: end -->";

/// The `--store` values of docs/stores.md's marked table: the first
/// backticked cell of each row below the header, without a trailing `://` (`memory`,
/// `redis`, `redis+sentinel`, ...), in the order of the rows.
fn documented_stores(page: &str) -> Vec<String> {
    let start = page
        .find(STORES_BEGIN)
        .unwrap_or_else(|| panic!("{STORES_DOC} has no `{STORES_BEGIN} ...` mark"));
    let table = &page[start..];
    let end = table
        .find(STORES_END)
        .unwrap_or_else(|| panic!("{STORES_DOC} has no `{STORES_END}` mark"));
    // The rows after the header's `|---|` line.
    table[..end]
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("|-") && !l.starts_with("| -"))
        .skip(1)
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(value, _)| value.trim_end_matches("://").to_owned())
        .collect()
}

/// docs/stores.md lists exactly the store schemes `Store::open` accepts,
/// each once: a store added to the code and not to the docs (or the
/// reverse) fails here.
#[test]
fn stores_page_lists_exactly_the_schemes_the_broker_opens() {
    let documented = documented_stores(&repo_file(STORES_DOC));
    let listed: BTreeSet<String> = documented.iter().cloned().collect();
    assert_eq!(
        listed.len(),
        documented.len(),
        "{STORES_DOC} lists a store twice: {documented:?}"
    );
    let accepted: BTreeSet<String> = leasehold_server::store::SCHEMES
        .iter()
        .map(ToString::to_string)
        .collect();
    let undocumented: Vec<_> = accepted.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&accepted).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "{STORES_DOC}'s table of stores and store::SCHEMES differ:\n  \
         accepted by Store::open, missing from {STORES_DOC}: {undocumented:?}\n  \
         in {STORES_DOC}, not accepted by Store::open: {unknown:?}"
    );
}

/// The scanner of the stores table reads only the marked rows.
#[test]
fn the_stores_scanner_reads_the_marked_rows() {
    let page = "| `elsewhere://` | no |\n<!-- store-schemes: begin -->\n| `--store` | store |\n|---|---|\n| `memory` | memory |\n| `redis://` | Redis |\n<!-- store-schemes: end -->\n| `after://` | no |\n";
    assert_eq!(documented_stores(page), ["memory", "redis"]);
}

/// README.md is at most [`README_MAX_LINES`] lines.
#[test]
fn readme_is_short() {
    let lines = repo_file("README.md").lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move the detail to a page of docs/"
    );
}

/// The lines of a Markdown page outside fenced code blocks.
fn prose_lines(page: &str) -> Vec<&str> {
    let mut fenced = false;
    page.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The anchor GitHub gives a heading: lowercase, without punctuation
/// (letters, digits, `-`, `_` and spaces kept), spaces made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown page's headings (a repeated heading's with
/// GitHub's `-1`, `-2`... suffixes).
fn anchors(page: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in prose_lines(page) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor(&line[hashes..]);
        let mut candidate = base.clone();
        let mut n = 0;
        while found.contains(&candidate) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
        found.insert(candidate);
    }
    found
}

/// The targets of a Markdown page's inline links `[text](target)`, outside
/// code blocks and code spans.
fn link_targets(page: &str) -> Vec<String> {
    let prose = prose_lines(page).join("\n");
    let mut targets = Vec::new();
    // Paragraph by paragraph: a code span may wrap onto the next line, not
    // into the next paragraph.
    for paragraph in prose.split("\n\n") {
        // Code spans out (a link's text may be one: [`a`](b) stays a link).
        let text: String = paragraph
            .split('`')
            .step_by(2)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split_whitespace().next().unwrap_or_default();
            targets.push(target.to_owned());
            rest = &rest[end..];
        }
    }
    targets
}

/// The Markdown pages whose links are checked: README.md, CONTRIBUTING.md
/// and every page of docs/, by their path from the repository's root.
fn linked_pages() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec!["README.md".to_owned(), "CONTRIBUTING.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("a docs/ folder")
        .map(|entry| {
            entry
                .expect("read docs/")
                .file_name()
                .into_string()
                .unwrap()
        })
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// Every relative link of README.md, CONTRIBUTING.md and docs/*.md points
/// to a file (or folder) that exists, and an `#anchor` to a heading of
/// that Markdown file (or of the page itself).
#[test]
fn every_relative_link_of_the_docs_resolves() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let pages = linked_pages();
    assert!(pages.len() >= 8, "too few pages found in docs/: {pages:?}");
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = repo_file(page);
        let dir = std::path::Path::new(page).parent().unwrap();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, fragment) = match target.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                std::path::PathBuf::from(page)
            } else {
                dir.join(file)
            };
            let full = root.join(&path);
            if !full.exists() {
                broken.push(format!("{page}: {target} (no {})", path.display()));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if full.extension().is_some_and(|e| e == "md") {
                let headings = anchors(&std::fs::read_to_string(&full).unwrap());
                if !headings.contains(fragment) {
                    broken.push(format!(
                        "{page}: {target} (no heading #{fragment} in {})",
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(checked >= 50, "too few relative links found: {checked}");
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

/// The link scanner and the anchors are read as GitHub reads them.
#[test]
fn links_and_anchors_are_read_as_github_does() {
    let page = "# Title\n\nSee [a](a.md#x-y), [`b`](../b.md) and `[not](a\nlink)`, [c](c.md).\n\n```\n[code](c.md)\n# not a heading\n```\n\n## Fences across a Redis failover: `--replica-acks`\n## Title\n";
    assert_eq!(link_targets(page), ["a.md#x-y", "../b.md", "c.md"]);
    let found = anchors(page);
    let expected: BTreeSet<String> = [
        "title",
        "title-1",
        "fences-across-a-redis-failover---replica-acks",
    ]
    .map(String::from)
    .into();
    assert_eq!(found, expected);
    assert_eq!(anchor("3. Alerts"), "3-alerts");
}
