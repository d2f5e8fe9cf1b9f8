//! A listing's walk over the names (docs/design/zookeeper.md, section
//! 3.6): the buckets that hold names (one `getChildren` of the root: a
//! bucket is a container, gone with its last name), bucket by bucket in
//! order, a `getChildren` per bucket, then each name of the prefix
//! described as Describe does.
//!
//! Buckets partition the names, so a name is on one page only; a page
//! token is the bucket and the last name looked at (`<3 hex digits>` or
//! `<3 hex digits>/<name's segment>`), which resumes after that name. A
//! prefix does not narrow the walk (a hash scatters a prefix's names over
//! every bucket, as Redis' SCAN over its key space): the cost of one call
//! is bounded by its budget: at most that many buckets listed and names
//! described, besides the root's listing (4,096 children at most),
//! whatever the store holds.

use futures_util::{stream, StreamExt};
use zookeeper_client as zk;

use super::{
    layout::{bucket_path, name_of, segment, BUCKETS, NAMES},
    ZooKeeper,
};
use crate::{
    error::Result,
    store::{bad_token, Described, Listed, Listing},
};

/// How many names of a page are described at once.
const AT_ONCE: usize = 16;

/// Where a page starts: a bucket, and in it the names after one.
#[derive(Debug, PartialEq, Eq)]
struct Resume {
    bucket: u16,
    after: Option<String>,
}

impl Resume {
    fn token(&self) -> String {
        match &self.after {
            None => format!("{:03x}", self.bucket),
            Some(name) => format!("{:03x}/{}", self.bucket, segment(name)),
        }
    }

    /// A page token read back; `None` for one no listing gave.
    fn parse(token: &str) -> Option<Resume> {
        let (bucket, after) = match token.split_once('/') {
            Some((bucket, segment)) => (bucket, Some(name_of(segment)?)),
            None => (token, None),
        };
        if bucket.len() != 3 || !bucket.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let bucket = u16::from_str_radix(bucket, 16).ok()?;
        (bucket < BUCKETS).then_some(Resume { bucket, after })
    }
}

impl ZooKeeper {
    /// One page of the walk over the names starting with `prefix`, from
    /// `resume` ([`Listing::next`] of an earlier page), listing no more
    /// than `budget` buckets and describing no more than `budget` names;
    /// with the highest fence read.
    pub async fn list(
        &self,
        prefix: &str,
        resume: Option<&str>,
        budget: usize,
    ) -> Result<(Listing, u64)> {
        let mut at = match resume {
            Some(token) => Resume::parse(token).ok_or_else(bad_token)?,
            None => Resume {
                bucket: 0,
                after: None,
            },
        };
        let client = self.client().await?;
        let budget = budget.max(1);
        // The buckets that hold names (containers: an empty one goes).
        let mut buckets: Vec<u16> = match self
            .bounded("the buckets' listing", client.list_children(NAMES))
            .await
        {
            Ok(children) => children
                .iter()
                .filter(|b| b.len() == 3)
                .filter_map(|b| u16::from_str_radix(b, 16).ok())
                .filter(|b| *b >= at.bucket && *b < BUCKETS)
                .collect(),
            Err(e) => return Err(super::classify("the buckets' listing", &e)),
        };
        buckets.sort_unstable();
        let (mut listed, mut names) = (0, Vec::new());
        let mut buckets = buckets.into_iter().peekable();
        let next = loop {
            let Some(&bucket) = buckets.peek() else {
                break None;
            };
            if bucket != at.bucket {
                at = Resume {
                    bucket,
                    after: None,
                };
            }
            if listed >= budget || names.len() >= budget {
                break Some(at.token());
            }
            listed += 1;
            let children = match self
                .bounded(
                    "a bucket's listing",
                    client.list_children(&bucket_path(bucket)),
                )
                .await
            {
                Ok(children) => children,
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(super::classify("a bucket's listing", &e)),
            };
            let mut here: Vec<String> = children
                .iter()
                .filter_map(|child| name_of(child))
                .filter(|name| name.starts_with(prefix))
                .filter(|name| at.after.as_ref().is_none_or(|after| name > after))
                .collect();
            here.sort_unstable();
            let room = budget - names.len();
            if here.len() > room {
                here.truncate(room);
                at.after = here.last().cloned();
                names.extend(here);
                break Some(at.token());
            }
            names.extend(here);
            buckets.next();
        };
        let described: Vec<Result<(String, (Described, u64))>> = stream::iter(names)
            .map(|name| async move {
                let described = self.describe(&name).await?;
                Ok((name, described))
            })
            .buffered(AT_ONCE)
            .collect()
            .await;
        let mut entries = Vec::new();
        let mut fence = 0;
        for item in described {
            let (name, (described, last)) = item?;
            fence = fence.max(last);
            if !described.is_idle() {
                entries.push(Listed { name, described });
            }
        }
        entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok((Listing { entries, next }, fence))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_token_reads_back_and_a_forged_one_is_refused() {
        for resume in [
            Resume {
                bucket: 0,
                after: None,
            },
            Resume {
                bucket: 0xfff,
                after: Some("t|a/b%c".into()),
            },
        ] {
            assert_eq!(Resume::parse(&resume.token()), Some(resume));
        }
        for forged in ["", "1000", "fff0", "zzz", "00", "001/%zz", "-01", "+01"] {
            assert_eq!(Resume::parse(forged), None, "{forged}");
        }
    }
}
