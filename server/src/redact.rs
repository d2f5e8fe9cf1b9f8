//! What never reaches a log whole: owner tokens and store passwords. A leaf
//! module, so every layer (store, lease, server) can use it without
//! depending on another.

use std::fmt;

/// Displays a token's first 4 characters only: enough to correlate log lines
/// of one lease, useless for taking it over.
pub struct Redacted<'a>(pub &'a str);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = self.0.get(..4).unwrap_or("");
        write!(f, "{prefix}…")
    }
}

/// A store URL fit for logs: any password replaced by `***`.
pub fn url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}://{user}:***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_shows_four_characters() {
        let token = "0123456789abcdef0123456789abcdef";
        assert_eq!(Redacted(token).to_string(), "0123…");
        assert_eq!(Redacted("é").to_string(), "…");
    }

    #[test]
    fn store_urls_are_logged_without_passwords() {
        assert_eq!(
            url("redis://:s3cret@redis:6379/0"),
            "redis://:***@redis:6379/0"
        );
        assert_eq!(url("rediss://app:pw@r:6380"), "rediss://app:***@r:6380");
        assert_eq!(url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(url("memory"), "memory");
    }
}
