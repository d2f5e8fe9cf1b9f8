//! The places in line this broker holds, and their lapse.
//!
//! A place is an ephemeral sequential node of the broker's session
//! (`q-<token>-<seq>`), so a dead broker's places go with its session, and
//! keeping a live waiter's place costs no write. But the contract gives a
//! place a lifetime of its own: one its waiter stops refreshing lapses
//! within [`QUEUE_LIFETIME`] (a place kept by `keep_place` after a wait ran
//! out, or one whose dequeue failed while the store was unreachable: the
//! lease layer leaves both to lapse). An ephemeral node would outlive that
//! by the broker's whole life, and stand first in line forever, refusing
//! every other caller of the name with QUEUE (the model checker found a
//! semaphore with free permits refusing every caller so).
//!
//! So the broker remembers every place it took, and when each was last
//! refreshed (taken, kept by an attempt, or renewed by
//! [`super::ZooKeeper::refresh_places`]); a task ([`run`]) deletes the
//! places not refreshed for [`QUEUE_LIFETIME`]. A place whose creation's
//! answer was lost (its node's sequence unknown) is found by its token in
//! the name's line. A place the grant deleted, or its waiter's dequeue,
//! leaves the registry there and then.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError, Weak},
    time::Instant,
};

use zookeeper_client as zk;

use super::{layout::NamePaths, ZooKeeper};
use crate::store::contract::{QUEUE_LIFETIME, QUEUE_REFRESH};

/// A place this broker took: its node (the child's name, when known) and
/// when it was last refreshed.
struct Place {
    node: Option<String>,
    refreshed: Instant,
}

/// The places this broker took, by name and token.
#[derive(Default)]
pub(super) struct Places {
    by_key: Mutex<HashMap<(String, String), Place>>,
}

impl Places {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Place>> {
        self.by_key.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `token` took or kept a place in `name`'s line now (`node`: its
    /// child's name, when known).
    pub(super) fn touched(&self, name: &str, token: &str, node: Option<String>) {
        let mut map = self.map();
        let place = map
            .entry((name.to_owned(), token.to_owned()))
            .or_insert(Place {
                node: None,
                refreshed: Instant::now(),
            });
        place.refreshed = Instant::now();
        if node.is_some() {
            place.node = node;
        }
    }

    /// The waiters `tokens` of `name` renewed their places now.
    pub(super) fn refreshed(&self, name: &str, tokens: &[String]) {
        let mut map = self.map();
        let now = Instant::now();
        for token in tokens {
            if let Some(place) = map.get_mut(&(name.to_owned(), token.clone())) {
                place.refreshed = now;
            }
        }
    }

    /// `token`'s place in `name`'s line is gone (granted, or dequeued).
    pub(super) fn left(&self, name: &str, token: &str) {
        self.map().remove(&(name.to_owned(), token.to_owned()));
    }

    /// Takes out the places not refreshed for [`QUEUE_LIFETIME`].
    fn lapsed(&self) -> Vec<(String, String, Option<String>)> {
        let mut map = self.map();
        let mut lapsed = Vec::new();
        map.retain(|(name, token), place| {
            let keep = place.refreshed.elapsed() < QUEUE_LIFETIME;
            if !keep {
                lapsed.push((name.clone(), token.clone(), place.node.take()));
            }
            keep
        });
        lapsed
    }
}

/// Deletes the lapsed places of this broker every [`QUEUE_REFRESH`], until
/// the store is dropped. A deletion that fails (the store unreachable) is
/// tried again at the next round; a session that ended took the places
/// with it, and their deletion finds nothing.
pub(super) async fn run(zk: Weak<ZooKeeper>) {
    let mut tick = tokio::time::interval(QUEUE_REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(zk) = zk.upgrade() else {
            return;
        };
        for (name, token, node) in zk.places.lapsed() {
            if let Err(e) = zk.remove_place(&name, &token, node.as_deref()).await {
                tracing::debug!(error = %e, "ZooKeeper store: a lapsed place's deletion failed");
                // Tried again at the next round.
                zk.places.map().insert(
                    (name, token),
                    Place {
                        node,
                        refreshed: Instant::now()
                            .checked_sub(QUEUE_LIFETIME)
                            .unwrap_or_else(Instant::now),
                    },
                );
            }
        }
    }
}

impl ZooKeeper {
    /// Deletes `token`'s place in `name`'s line: `node` when known, else
    /// every place of the token the line shows.
    async fn remove_place(
        &self,
        name: &str,
        token: &str,
        node: Option<&str>,
    ) -> crate::error::Result<()> {
        let client = self.client().await?;
        let paths = NamePaths::new(name, self.acls());
        let nodes = match node {
            Some(node) => vec![node.to_owned()],
            None => self
                .line_of(name)
                .await?
                .into_iter()
                .filter(|(t, _)| t == token)
                .map(|(_, node)| node)
                .collect(),
        };
        for node in nodes {
            match self
                .bounded(
                    "a lapsed place's removal",
                    client.delete(&paths.child(&node), None),
                )
                .await
            {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(super::classify("a lapsed place's removal", &e)),
            }
        }
        Ok(())
    }
}
