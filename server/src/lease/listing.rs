//! Listing: the names of a namespace with something on them (a lease,
//! permits, waiters, a lock-delay), a bounded page at a time, for
//! operators (`leasehold list`, the JSON API, the status page) and the
//! census of held leases.
//!
//! Scoped like Describe: a caller lists its own tenant's names; an
//! administrator may name another tenant, or `*` for every tenant. Each
//! call looks at no more than `page_size` names in the store (at most
//! [`MAX_PAGE`]), whatever the store holds, so that a listing never stalls
//! the store; the caller walks on with the page token.

use super::{
    tenant::{split_stored, ROOT_TENANT},
    validate, Caller, Leases,
};
use crate::{
    error::{Error, Result},
    store::{bad_token, Described, Listed},
};

/// Names one List call looks at when the caller does not say.
pub const DEFAULT_PAGE: u32 = 100;

/// The most names one List call may look at: the bound on one call's cost
/// in the store (a Redis SCAN of about this many keys, a PostgreSQL index
/// range of this many rows).
pub const MAX_PAGE: u32 = 1000;

/// The tenant field of a listing of every tenant's names.
pub const ALL_TENANTS: &str = "*";

/// What a caller asks of List (fields as in the proto).
#[derive(Clone, Debug, Default)]
pub struct ListArgs {
    /// Only names that start with this.
    pub prefix: String,
    /// Empty for the caller's own tenant, a tenant id, `@root`, or
    /// [`ALL_TENANTS`].
    pub tenant: String,
    /// Names to look at in this call; 0 for [`DEFAULT_PAGE`].
    pub page_size: u32,
    /// The previous page's `next_page_token`; empty to start.
    pub page_token: String,
}

/// One listed name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedLock {
    /// The tenant whose name it is (`@root` for the root namespace).
    pub tenant: String,
    /// The name as its holders name it.
    pub name: String,
    /// What is on it.
    pub described: Described,
}

/// One page of a listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// The names of the page with something on them.
    pub locks: Vec<ListedLock>,
    /// Empty when the walk is done, else the token of the next page.
    pub next_page_token: String,
}

/// Whether a stored name is the broker's own (the census taker's lease):
/// `@` is in neither the lock-name nor the tenant-id alphabet, so no
/// caller's name starts with it, and no listing shows it.
pub(crate) fn is_internal(stored: &str) -> bool {
    stored.starts_with('@')
}

/// Which stored names a listing reads, and which of those it keeps.
struct Scope {
    /// The store-name prefix of the walk.
    stored_prefix: String,
    /// Keep only names of the root namespace (the walk of `""` also meets
    /// every tenant's `tenant|name`).
    root_only: bool,
    /// For a walk over every tenant: the prefix each name (after its
    /// tenant) must have.
    name_prefix: Option<String>,
}

impl Leases {
    /// One page of the names in the caller's namespace (or, for an
    /// administrator, `args.tenant`'s, or every tenant's) that start with
    /// `args.prefix` and have something on them.
    pub async fn list(&self, caller: &Caller, args: &ListArgs) -> Result<ListPage> {
        prefix(&self.inner.limits, &args.prefix)?;
        let budget = page_size(args.page_size)?;
        let resume = page_token(&self.inner.limits, &args.page_token)?;
        let scope = scope(caller, args)?;
        let listing = self.count_errors(
            self.inner
                .store
                .list(&scope.stored_prefix, resume, budget)
                .await,
        )?;
        let locks = listing
            .entries
            .into_iter()
            .filter_map(|listed| scope.keep(listed))
            .collect();
        Ok(ListPage {
            locks,
            next_page_token: listing.next.unwrap_or_default(),
        })
    }
}

impl Scope {
    /// The listed name in the caller's terms, if the scope keeps it.
    fn keep(&self, Listed { name, described }: Listed) -> Option<ListedLock> {
        if is_internal(&name) {
            return None;
        }
        let (tenant, bare) = split_stored(&name);
        let (tenant, name) = (tenant.to_owned(), bare.to_owned());
        if self.root_only && tenant != ROOT_TENANT {
            return None;
        }
        if let Some(prefix) = &self.name_prefix {
            if !name.starts_with(prefix.as_str()) {
                return None;
            }
        }
        Some(ListedLock {
            tenant,
            name,
            described,
        })
    }
}

/// Which names `caller` may list with `args`, refusing what it may not.
fn scope(caller: &Caller, args: &ListArgs) -> Result<Scope> {
    let own = args.tenant.is_empty() || args.tenant == caller.tenant().id();
    if own {
        if !caller.permissions().admin {
            caller.require_use()?;
        }
        return Ok(Scope {
            stored_prefix: caller.tenant().qualify(&args.prefix),
            root_only: caller.tenant().id() == ROOT_TENANT,
            name_prefix: None,
        });
    }
    if args.tenant == ALL_TENANTS {
        caller.require_admin("Listing every tenant's locks")?;
        // Tenants prefix the stored names, so a name prefix cannot narrow
        // the walk: it filters what the walk meets.
        return Ok(Scope {
            stored_prefix: String::new(),
            root_only: false,
            name_prefix: Some(args.prefix.clone()).filter(|p| !p.is_empty()),
        });
    }
    caller.require_admin("Listing another tenant's locks")?;
    if args.tenant != ROOT_TENANT {
        validate::tenant(&args.tenant)?;
    }
    Ok(Scope {
        stored_prefix: super::store_name(&args.tenant, &args.prefix),
        root_only: args.tenant == ROOT_TENANT,
        name_prefix: None,
    })
}

/// Checks a name prefix: empty, or the start of a name the lock-name rules
/// accept.
fn prefix(limits: &super::Limits, prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    validate::name(limits, prefix).map_err(|e| match e {
        Error::BadArgument { message, facts, .. } => Error::BadArgument {
            message: message.replacen("the lock name", "the name prefix", 1),
            argument: "prefix",
            facts,
        },
        other => other,
    })
}

/// The names to look at in one call.
fn page_size(asked: u32) -> Result<usize> {
    let size = match asked {
        0 => DEFAULT_PAGE,
        n if n > MAX_PAGE => {
            return Err(Error::bad(
                "page_size",
                format!(
                    "a page of {n} names was asked for; a listing looks at most {MAX_PAGE} \
                     names per call: ask for fewer and follow the page token"
                ),
                vec![("max_page_size", MAX_PAGE.to_string())],
            ))
        }
        n => n,
    };
    Ok(size as usize)
}

/// The resume point a page token carries, if any. The store reads it (a
/// name, or a Redis cursor) and refuses one it cannot; here only its size
/// and alphabet are bounded: a token is a name of the store or a number.
fn page_token<'a>(limits: &super::Limits, token: &'a str) -> Result<Option<&'a str>> {
    if token.is_empty() {
        return Ok(None);
    }
    // A stored name: a tenant id (64), the separator and a name.
    let longest = limits.max_name_len + 65;
    let readable = token.len() <= longest
        && token.chars().all(|c| {
            c.is_ascii_graphic() && !matches!(c, '{' | '}' | '*' | '?' | '[' | ']' | '\\')
        });
    if !readable {
        return Err(bad_token());
    }
    Ok(Some(token))
}
