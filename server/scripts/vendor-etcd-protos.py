#!/usr/bin/env python3
"""Vendors etcd's v3 API protos into server/proto/etcd/, for the server's
build.rs (the etcd store's client) and the bench's (protox).

Takes the files from a git clone of github.com/etcd-io/etcd at a ref (etcd
3.4's layout: etcdserver/etcdserverpb/, mvcc/mvccpb/, auth/authpb/,
etcdserver/api/v3lock/v3lockpb/), keeps every service, message, field,
package name and comment, and strips only what protox cannot resolve without
the Go toolchain's protos: the gogoproto import and its `option
(gogoproto.*)` lines, the google/api/annotations.proto import (and the "for
grpc-gateway" comment above it) and each rpc's `option (google.api.http) =
{...};` block (the rpc keeps an empty body, `{}`). Each file gets a header
saying where it came from and what was stripped. The import paths stay
etcd's own (`etcd/mvcc/mvccpb/kv.proto`, ...): the files are written under
server/proto/etcd/ at etcd's paths, and both build.rs include server/proto/.

Usage: server/scripts/vendor-etcd-protos.py ETCD_GIT_DIR [REF]   (REF:
v3.4.23 by default, the etcd of Debian 12's etcd-server, which the bench
runs against).
"""
import os, re, subprocess, sys

FILES = [
    "etcdserver/etcdserverpb/rpc.proto",
    "mvcc/mvccpb/kv.proto",
    "auth/authpb/auth.proto",
    "etcdserver/api/v3lock/v3lockpb/v3lock.proto",
]

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto", "etcd")


def strip_http_options(text):
    """Replaces each rpc body holding only an `option (google.api.http)`
    with `{}`; the text and how many were replaced."""
    opener = re.compile(r"\{\s*option \(google\.api\.http\) = \{")
    out, n, at = [], 0, 0
    while (m := opener.search(text, at)) is not None:
        depth, i = 1, m.end()
        while depth:  # to the end of the mapping's braces
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        tail = re.match(r"\s*;\s*\}", text[i:])
        if tail is None:
            sys.exit(f"an rpc body with more than its HTTP mapping at {m.start()}")
        out.append(text[at : m.start()] + "{}")
        at = i + tail.end()
        n += 1
    out.append(text[at:])
    return "".join(out), n


def strip(text):
    stripped = []
    text, n = re.subn(r'^import "gogoproto/gogo\.proto";\n', "", text, flags=re.M)
    if n:
        stripped.append('the import of "gogoproto/gogo.proto"')
    text, n = re.subn(r"^option \(gogoproto\.[a-z_]+\) = [a-z]+;\n", "", text, flags=re.M)
    if n:
        stripped.append(f"{n} file options `option (gogoproto.*)`")
    text, n = re.subn(
        r'^(// for grpc-gateway\n)?import "google/api/annotations\.proto";\n',
        "",
        text,
        flags=re.M,
    )
    if n:
        stripped.append('the import of "google/api/annotations.proto" and its "for grpc-gateway" comment')
    # An rpc's HTTP mapping: `{ option (google.api.http) = { ... }; }`
    # becomes `{}` (the mapping's braces nest: additional_bindings {...}).
    text, n = strip_http_options(text)
    if n:
        stripped.append(f"{n} rpc options `option (google.api.http) = {{...}}` (grpc-gateway)")
    # Anything left of the two would not compile: say so now.
    for left in ("gogoproto", "google.api", "google/api"):
        if left in text:
            sys.exit(f"left after stripping: {left}")
    # Blank lines the removed imports and options leave, run together.
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text, stripped


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    git_dir = sys.argv[1]
    ref = sys.argv[2] if len(sys.argv) == 3 else "v3.4.23"
    commit = subprocess.run(
        ["git", "--git-dir", git_dir, "rev-parse", f"{ref}^{{commit}}"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    for path in FILES:
        text = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
            check=True, capture_output=True, text=True,
        ).stdout
        text, stripped = strip(text)
        header = (
            f"// Vendored from etcd {ref} (github.com/etcd-io/etcd at commit\n"
            f"// {commit}): {path}.\n"
            "// Apache License 2.0. Written by bench/scripts/vendor-etcd-protos.py:\n"
            "// unchanged but for what protox cannot resolve without etcd's Go\n"
            "// dependencies' protos. Stripped:\n"
            + "".join(f"//   - {s};\n" for s in stripped or ["nothing"])
            + "// packages, services, messages, fields and comments are etcd's.\n"
        )
        out = os.path.join(OUT, path)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(header + text)
        print(f"{out}: {', '.join(stripped) or 'nothing stripped'}")


if __name__ == "__main__":
    main()
