//! Authentication: who a request comes from, by bearer token or by the
//! client certificate of a mutual-TLS connection, mapped to a tenant and
//! its permissions by the `--auth-file`.
//!
//! The file holds one credential per line:
//!
//! ```text
//! # tenant    permissions   credential
//! payments    use           token:sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! payments    use           cert:payments-worker
//! ops         use,admin     cert:spiffe://example.org/ops
//! public      use           anonymous
//! ```
//!
//! Tokens are stored as their SHA-256, never in clear: a leaked file grants
//! nothing. A fast hash is enough because tokens are random (`leasehold
//! token` makes 256-bit ones); a password hash (bcrypt, argon2) would only
//! slow every request down. A `cert:` name matches the certificate's subject
//! common name or any of its DNS or URI subject alternative names (a SPIFFE
//! ID, say); the certificate itself is checked by TLS against
//! `--tls-client-ca`. `anonymous` names the tenant of callers with neither:
//! without that line they are refused.
//!
//! The tenant `@root` is the root namespace: the locks of callers of a
//! broker without `--auth-file`, stored under their bare names. Mapping
//! existing callers' credentials to it turns authentication on without
//! moving their locks, so replicas with and without the file can run side by
//! side in a rolling update and still grant each lock to one holder:
//!
//! ```text
//! @root       use           token:sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
//! ```

use std::{
    collections::HashMap,
    fmt::Write as _,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use crate::{
    error::{Error, Result},
    lease::{Permissions, ROOT_TENANT},
};

/// Prefix of the tokens `leasehold token` makes: lets secret scanners spot
/// a leaked one.
pub const TOKEN_PREFIX: &str = "lh_";

/// The SHA-256 of a bearer token.
pub fn hash_token(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut hash = [0u8; 32];
    hash.copy_from_slice(digest.as_ref());
    hash
}

/// The `token:sha256:<hex>` credential of a bearer token, for the auth file.
pub fn token_credential(token: &str) -> String {
    let mut line = String::from("token:sha256:");
    for b in hash_token(token) {
        let _ = write!(line, "{b:02x}");
    }
    line
}

/// A new random bearer token: `lh_` and 64 hex digits (256 bits).
pub fn generate_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::Internal(format!("no randomness for a token: {e}")))?;
    let mut token = String::from(TOKEN_PREFIX);
    for b in bytes {
        let _ = write!(token, "{b:02x}");
    }
    Ok(token)
}

/// What a credential grants: a tenant and permissions in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The tenant's id.
    pub tenant: String,
    /// What the holder of the credential may do.
    pub permissions: Permissions,
}

/// The credentials of one auth file.
#[derive(Debug, Default)]
struct Grants {
    tokens: HashMap<[u8; 32], Grant>,
    certs: HashMap<String, Grant>,
    anonymous: Option<Grant>,
}

/// The `--auth-file`, reloadable.
#[derive(Debug)]
pub struct Auth {
    path: PathBuf,
    /// A std lock: read once per request for a pointer copy; the reload
    /// swaps the whole table.
    grants: RwLock<Arc<Grants>>,
    /// Bumped by every reload that changed the credentials: open streams
    /// look again at theirs (see [`Auth::reloads`]).
    reloaded: tokio::sync::watch::Sender<u64>,
}

impl Auth {
    /// Reads the file; an error names the file and line.
    pub fn load(path: &Path) -> Result<Self> {
        Ok(Auth {
            grants: RwLock::new(Arc::new(read(path)?)),
            path: path.to_owned(),
            reloaded: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Credentials from the bytes of a file, with no file behind them: for
    /// the fuzz targets (see `crate::fuzzing`); a reload of it fails.
    pub(crate) fn parsed(bytes: &[u8]) -> std::result::Result<Self, String> {
        Ok(Auth {
            grants: RwLock::new(Arc::new(parse_bytes(bytes)?)),
            path: PathBuf::new(),
            reloaded: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Reads the file again. On error the current credentials stay.
    pub fn reload(&self) -> Result<()> {
        let grants = Arc::new(read(&self.path)?);
        *self
            .grants
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = grants;
        self.reloaded.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Changes whenever a reload replaced the credentials: a stream opened
    /// under a credential that is gone, or lost a permission, must end.
    pub fn reloads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloaded.subscribe()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who presents `bearer` (the token of an `authorization: Bearer`
    /// header, if any) on a connection whose client certificate bears
    /// `cert_names`. A token, when given, decides alone: a wrong one is
    /// refused even on a connection whose certificate would be admitted.
    pub fn authenticate(&self, bearer: Option<&str>, cert_names: &[String]) -> Result<Grant> {
        self.authenticate_hashed(bearer.map(hash_token).as_ref(), cert_names)
    }

    /// [`Auth::authenticate`] with the bearer token's hash (what a stream
    /// keeps, to look again after a reload, rather than the token).
    pub fn authenticate_hashed(
        &self,
        bearer: Option<&[u8; 32]>,
        cert_names: &[String],
    ) -> Result<Grant> {
        let grants = Arc::clone(
            &self
                .grants
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if let Some(hash) = bearer {
            // Looked up by hash: what a timing difference could reveal is
            // a prefix of a hash, which does not lead back to a token.
            return grants.tokens.get(hash).cloned().ok_or_else(|| {
                Error::Unauthenticated(
                    "the bearer token is not one this broker knows (not in its --auth-file, \
                     or revoked there): check the token your client sends"
                        .into(),
                )
            });
        }
        if let Some(grant) = cert_names.iter().find_map(|n| grants.certs.get(n)) {
            return Ok(grant.clone());
        }
        if let Some(grant) = &grants.anonymous {
            return Ok(grant.clone());
        }
        Err(Error::Unauthenticated(if cert_names.is_empty() {
            "this broker requires authentication: send the metadata \
             `authorization: Bearer <token>`, or connect with a client certificate named in \
             its --auth-file"
                .into()
        } else {
            format!(
                "the client certificate ({}) is not named in this broker's --auth-file, and \
                 no bearer token was sent",
                cert_names.join(", ")
            )
        }))
    }
}

/// Checks one auth-file line, as the broker would read it.
pub fn check_line(line: &str) -> std::result::Result<(), String> {
    parse(line).map(|_| ())
}

fn read(path: &Path) -> Result<Grants> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::InvalidArgument(format!("--auth-file {}: {e}", path.display())))?;
    parse_bytes(&bytes)
        .map_err(|e| Error::InvalidArgument(format!("--auth-file {}: {e}", path.display())))
}

/// Parses an auth file as read from disk: any bytes give grants or an
/// error naming the line (text that is not UTF-8 included), never a panic.
fn parse_bytes(bytes: &[u8]) -> std::result::Result<Grants, String> {
    if let Err(e) = std::str::from_utf8(bytes) {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        return Err(format!("line {line}: not UTF-8 text"));
    }
    parse(&String::from_utf8_lossy(bytes))
}

/// Parses an auth file; an error names the line and what is wrong with it,
/// never the line itself nor any field of it (a secret may sit in any field
/// by mistake).
fn parse(text: &str) -> std::result::Result<Grants, String> {
    let mut grants = Grants::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |what: String| format!("line {}: {what}", i + 1);
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [tenant, permissions, credential] = fields[..] else {
            return Err(at(format!(
                "expected `<tenant> <permissions> <credential>`, found {} fields",
                fields.len()
            )));
        };
        check_tenant(tenant).map_err(&at)?;
        let grant = Grant {
            tenant: tenant.to_owned(),
            permissions: parse_permissions(permissions).map_err(&at)?,
        };
        if credential == "anonymous" {
            if grants.anonymous.replace(grant).is_some() {
                return Err(at("a second `anonymous` line: there can be one".into()));
            }
        } else if let Some(hex) = credential.strip_prefix("token:sha256:") {
            let hash = parse_hash(hex).map_err(&at)?;
            if grants.tokens.insert(hash, grant).is_some() {
                return Err(at("this token hash is already on an earlier line".into()));
            }
        } else if let Some(name) = credential.strip_prefix("cert:") {
            if name.is_empty() {
                return Err(at("`cert:` needs the certificate's name after it".into()));
            }
            if grants.certs.insert(name.to_owned(), grant).is_some() {
                return Err(at("this cert: name is already on an earlier line".into()));
            }
        } else {
            return Err(at(
                "the credential must be `token:sha256:<64 hex digits>`, `cert:<name>` or \
                 `anonymous` (a token is written as its hash: see `leasehold token`)"
                    .into(),
            ));
        }
    }
    Ok(grants)
}

/// A tenant id as the file may name it: an ordinary one, or the root
/// namespace's.
fn check_tenant(id: &str) -> std::result::Result<(), String> {
    if id == ROOT_TENANT {
        return Ok(());
    }
    // Not validate::tenant's message: it quotes the id, which here could be
    // a token written in the wrong field.
    crate::lease::validate::tenant(id).map_err(|_| {
        "the tenant is not a tenant id: 1 to 64 of A-Z a-z 0-9 _ -, or @root for the root \
         namespace (the locks of callers of a broker without --auth-file)"
            .to_owned()
    })
}

fn parse_permissions(text: &str) -> std::result::Result<Permissions, String> {
    let mut permissions = Permissions::default();
    for p in text.split(',') {
        match p {
            "use" => permissions.use_locks = true,
            "admin" => permissions.admin = true,
            _ => {
                return Err(
                    "unknown permission (not quoted: it could be a misplaced secret): use \
                     `use`, `admin` or `use,admin`"
                        .to_owned(),
                )
            }
        }
    }
    Ok(permissions)
}

fn parse_hash(hex: &str) -> std::result::Result<[u8; 32], String> {
    let bad = || "a token hash is 64 hex digits (the SHA-256 of the token)".to_owned();
    // Bytes, not characters: a multi-byte character must not be sliced.
    let digits = hex.as_bytes();
    if digits.len() != 64 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(bad());
    }
    let nibble = |d: u8| match d {
        b'0'..=b'9' => d - b'0',
        _ => (d | 0x20) - b'a' + 10,
    };
    let mut hash = [0u8; 32];
    for (byte, pair) in hash.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0]) << 4 | nibble(pair[1]);
    }
    Ok(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(text: &str) -> Auth {
        Auth {
            path: PathBuf::from("test"),
            grants: RwLock::new(Arc::new(parse(text).unwrap())),
            reloaded: tokio::sync::watch::Sender::new(0),
        }
    }

    #[test]
    fn tokens_certificates_and_anonymous_map_to_tenants() {
        let token = generate_token().unwrap();
        assert!(token.starts_with("lh_") && token.len() == 67);
        let a = auth(&format!(
            "# comment\n\npayments use {}   # trailing comment\nops use,admin cert:ops\n\
             public use anonymous\n",
            token_credential(&token)
        ));
        let grant = a.authenticate(Some(&token), &[]).unwrap();
        assert_eq!(grant.tenant, "payments");
        assert!(grant.permissions.use_locks && !grant.permissions.admin);
        let ops = a
            .authenticate(None, &["other".into(), "ops".into()])
            .unwrap();
        assert_eq!(ops.tenant, "ops");
        assert!(ops.permissions.admin);
        assert_eq!(a.authenticate(None, &[]).unwrap().tenant, "public");
        // A wrong token is refused even where anonymous callers get in.
        let e = a.authenticate(Some("lh_wrong"), &[]).unwrap_err();
        assert!(matches!(e, Error::Unauthenticated(_)), "{e:?}");
        assert!(!e.to_string().contains("lh_wrong"));
    }

    #[test]
    fn without_anonymous_unknown_callers_are_refused_with_a_hint() {
        let a = auth("ops admin cert:ops\n");
        let e = a.authenticate(None, &[]).unwrap_err().to_string();
        assert!(e.contains("authorization: Bearer"), "{e}");
        let e = a
            .authenticate(None, &["stranger".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("stranger"), "{e}");
    }

    /// Property: any bytes give grants or an error naming a line, never a
    /// panic (a multi-byte character in a token hash used to slice one in
    /// two), and an error never quotes a field, so never a secret written
    /// in the wrong place.
    #[test]
    fn any_file_parses_or_names_its_line_without_quoting_it() {
        const SECRET: &str = "lh_SECRET";
        let pieces = [
            "payments",
            "@root",
            "use",
            "admin",
            "use,admin",
            "anonymous",
            "cert:ops",
            "cert:",
            "token:sha256:",
            "é",
            "ÿÿ",
            "#",
            " ",
            "\t",
            "\n",
            "\r\n",
            SECRET,
            "\u{1F512}",
            "\0",
            "0123456789abcdef",
            "+f",
        ];
        let mut seed = vec![0u8; 512 * 1024];
        getrandom::fill(&mut seed).unwrap();
        let mut bytes = seed.into_iter();
        let mut parsed = 0;
        for _ in 0..10_000 {
            let mut file = Vec::new();
            for _ in 0..bytes.next().unwrap_or(0) % 24 {
                match bytes.next().unwrap_or(0) {
                    // A raw byte: the file need not be UTF-8.
                    b if b >= 224 => file.push(bytes.next().unwrap_or(0)),
                    b => file.extend_from_slice(pieces[b as usize % pieces.len()].as_bytes()),
                }
            }
            match parse_bytes(&file) {
                Ok(_) => parsed += 1,
                Err(e) => {
                    assert!(e.starts_with("line "), "{e}");
                    assert!(!e.contains(SECRET), "{e}");
                }
            }
        }
        assert!(
            parsed > 0,
            "no random file parsed: the generator is too narrow"
        );
        // The byte-sliced hash that panicked the broker, and a sign that
        // u8::from_str_radix used to accept.
        let sliced = format!("t use token:sha256:a{}b", "é".repeat(31));
        assert!(parse(&sliced).unwrap_err().contains("64 hex digits"));
        let signed = format!("t use token:sha256:+f{}", "0".repeat(62));
        assert!(parse(&signed).unwrap_err().contains("64 hex digits"));
        let e = parse_bytes(b"ops use cert:ops\n\xff use anonymous\n").unwrap_err();
        assert_eq!(e, "line 2: not UTF-8 text");
        // Hex digits of either case read as the same hash.
        let upper = token_credential("lh_x")
            .to_uppercase()
            .replace("TOKEN:SHA256:", "token:sha256:");
        let a = auth(&format!("t use {upper}"));
        assert_eq!(a.authenticate(Some("lh_x"), &[]).unwrap().tenant, "t");
    }

    /// `@root` names the root namespace (the locks of callers without
    /// --auth-file); nothing near it does, and `root` stays an ordinary
    /// tenant, so no file that loaded before means something new now.
    #[test]
    fn the_root_namespace_is_the_reserved_tenant_at_root() {
        let token = generate_token().unwrap();
        let a = auth(&format!(
            "@root use {}\nroot use cert:r\n@root use,admin anonymous\n",
            token_credential(&token)
        ));
        let grant = a.authenticate(Some(&token), &[]).unwrap();
        assert_eq!(grant.tenant, ROOT_TENANT);
        assert!(grant.permissions.use_locks && !grant.permissions.admin);
        assert_eq!(a.authenticate(None, &["r".into()]).unwrap().tenant, "root");
        assert_eq!(a.authenticate(None, &[]).unwrap().tenant, "@root");
        assert!(check_line("@root use,admin cert:ops").is_ok());
        for near in [
            "@ROOT", "@Root", "@root-a", "@", "root@", "@@root", "-@root",
        ] {
            let e = parse(&format!("{near} use anonymous"))
                .err()
                .unwrap_or_default();
            assert!(
                e.starts_with("line 1: the tenant")
                    && e.contains("or @root for the root namespace"),
                "{near}: {e}"
            );
        }
    }

    #[test]
    fn bad_lines_are_named_without_echoing_them() {
        let cases = [
            ("a use", "line 1: expected"),
            ("a/b use anonymous", "line 1: the tenant is not a tenant id"),
            ("a read anonymous", "unknown permission (not quoted"),
            ("a use token:sha256:abc", "64 hex digits"),
            ("a use lh_0123456789", "must be `token:sha256"),
            ("a use anonymous\nb use anonymous", "line 2: a second"),
            ("a use cert:x\nb use cert:x", "line 2: this cert: name"),
        ];
        for (text, want) in cases {
            let e = parse(text).err().unwrap_or_default();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        // A token pasted in clear is not repeated in the error.
        assert!(!parse("a use lh_0123456789")
            .unwrap_err()
            .contains("lh_0123"));
    }
}
