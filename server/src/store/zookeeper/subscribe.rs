//! The ZooKeeper store's watches (docs/design/zookeeper.md, section 3.8):
//! one persistent recursive watch on the broker's session per watched
//! channel (a name's releases, or its grants), set on the name's node, so
//! that every change of the name's records reaches this replica, in the
//! order ZooKeeper applied them, and no change of a name nobody here
//! watches does.
//!
//! What wakes whom:
//! * releases: the name's `lock` or `delay` node deleted (released,
//!   revoked, taken over, a lock-delay gone): the waiter first in line now
//!   (read from ZooKeeper) and every observer; a permit deleted: every
//!   watch (a free permit may serve more than the first in line); a place
//!   in line deleted while no lock holds the name (its waiter left): the
//!   new first in line (a place the grant deleted is no news: the lock is
//!   there). An expiry deletes nothing and makes no event: the waiter's
//!   timer (the time left it was told) brings it back.
//! * grants: the `lock` node or a permit created.
//!
//! How it fails: a watch that cannot be set (ZooKeeper unreachable) fails
//! its subscribes at once, UNAVAILABLE, and is tried again after a pause
//! of 100 ms doubling to 2 s. A connection lost and found again within
//! the session keeps the watch, but ZooKeeper does not replay what changed
//! meanwhile (ZOOKEEPER-4698): every watch of the channel is woken. A
//! session that ended (expired while the broker was cut off longer than
//! its timeout) took the watch and every place in line of this broker
//! with it: the watch is set again on a new session and every watch of the
//! channel woken, so that each waiter looks again and takes a new place.

use std::{collections::HashMap, sync::Arc, time::Duration};

use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
};
use zookeeper_client as zk;

use super::{
    layout::{line, NamePaths, DELAY, LOCK, PERMIT_PREFIX, PLACE_PREFIX},
    ZooKeeper,
};
use crate::{
    error::{Error, Result},
    store::{
        watch::{parse_name_channel as parse, waiter_id, SubscriptionRequest, Watchers},
        Event,
    },
};

/// A subscribe's answer, once the channel's watch is set.
type Ack = oneshot::Sender<Result<()>>;

/// Runs the subscriptions until the store is dropped (its requests end):
/// a task per watched channel, which owns that channel's watch.
pub(super) async fn run(
    zk: Arc<ZooKeeper>,
    watchers: Watchers,
    mut requests: mpsc::UnboundedReceiver<SubscriptionRequest>,
) {
    let mut channels: HashMap<String, (mpsc::UnboundedSender<Ack>, JoinHandle<()>)> =
        HashMap::new();
    while let Some(request) = requests.recv().await {
        match request {
            SubscriptionRequest::Subscribe(channel, ack) => {
                let (acks, _) = channels.entry(channel.clone()).or_insert_with(|| {
                    let (acks, acks_rx) = mpsc::unbounded_channel();
                    let task = tokio::spawn(watch_channel(
                        Arc::clone(&zk),
                        watchers.clone(),
                        channel,
                        acks_rx,
                    ));
                    (acks, task)
                });
                if let Err(mpsc::error::SendError(ack)) = acks.send(ack) {
                    let _ = ack.send(Err(Error::Internal(
                        "the ZooKeeper store's watch task stopped".into(),
                    )));
                }
            }
            SubscriptionRequest::Unsubscribe(channel) => {
                // Its watch goes with the task (dropped: removed from the
                // session). Requests come in order: a later subscribe of
                // the same channel starts a new task.
                if let Some((_, task)) = channels.remove(&channel) {
                    task.abort();
                }
            }
        }
    }
    for (_, (_, task)) in channels {
        task.abort();
    }
}

/// Sets and keeps the watch of one channel, answering its subscribes,
/// until the task is aborted (the channel's last watch left) or its acks
/// end.
async fn watch_channel(
    zk: Arc<ZooKeeper>,
    watchers: Watchers,
    channel: String,
    mut acks: mpsc::UnboundedReceiver<Ack>,
) {
    let Some((event, name)) = parse(&channel) else {
        while let Some(ack) = acks.recv().await {
            let _ = ack.send(Err(Error::Internal(format!(
                "no ZooKeeper watch for the channel '{channel}'"
            ))));
        }
        return;
    };
    let paths = NamePaths::new(name, zk.acls());
    let mut pause = Duration::from_millis(100);
    let mut set_before = false;
    loop {
        let mut watcher = match set(&zk, &paths.node).await {
            Ok(watcher) => watcher,
            Err(e) => {
                tracing::debug!(error = %e, "ZooKeeper store: cannot set a watch");
                // Meanwhile a subscribe fails at once, as the store is down.
                let pause_over = tokio::time::sleep(pause);
                tokio::pin!(pause_over);
                loop {
                    tokio::select! {
                        () = &mut pause_over => break,
                        ack = acks.recv() => match ack {
                            Some(ack) => {
                                let _ = ack.send(Err(Error::Unavailable(e.to_string())));
                            }
                            None => return,
                        },
                    }
                }
                pause = (pause * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        pause = Duration::from_millis(100);
        if set_before {
            // Set again after a session ended: events went unseen, and
            // this broker's places in line went with the session.
            watchers.wake(&channel, "");
        }
        set_before = true;
        let mut disconnected = false;
        loop {
            tokio::select! {
                ack = acks.recv() => match ack {
                    Some(ack) => {
                        let _ = ack.send(Ok(()));
                    }
                    None => return,
                },
                seen = watcher.changed() => {
                    if seen.event_type == zk::EventType::Session {
                        match seen.session_state {
                            zk::SessionState::Disconnected => disconnected = true,
                            zk::SessionState::SyncConnected
                            | zk::SessionState::ConnectedReadOnly => {
                                if disconnected {
                                    // The watch is set again on the new
                                    // connection: a server keeps watches
                                    // per connection, and zookeeper-client
                                    // 0.11.2 sends only the one-shot ones
                                    // again when it reconnects (its
                                    // `resend_watches` keeps the highest
                                    // kind at 0, `index.max(index)`, so it
                                    // sends SetWatches, not SetWatches2).
                                    // Without this a watch set before a
                                    // leader's kill or partition heard no
                                    // release after it
                                    // (tests/zookeeper_failures.rs). The
                                    // new watcher first, then the old one
                                    // dropped: the client removes nothing
                                    // from the server while the path keeps
                                    // a watcher of the same mode.
                                    match set(&zk, &paths.node).await {
                                        Ok(again) => watcher = again,
                                        Err(e) => {
                                            tracing::debug!(
                                                error = %e,
                                                "ZooKeeper store: cannot set a watch again"
                                            );
                                            // Set again (and woken) by
                                            // the outer loop.
                                            break;
                                        }
                                    }
                                    // Changes while disconnected are not
                                    // replayed (ZOOKEEPER-4698).
                                    watchers.wake(&channel, "");
                                }
                                disconnected = false;
                            }
                            // Terminal: the watcher must not be polled
                            // again; set anew on the next session.
                            state if state.is_terminated() => break,
                            _ => {}
                        }
                        continue;
                    }
                    if let Some(next) = woken(&zk, event, name, &paths, &seen).await {
                        watchers.wake(&channel, &next);
                    }
                }
            }
        }
    }
}

/// Sets the persistent recursive watch on a name's node (which need not
/// exist), within the store timeout.
async fn set(zk: &ZooKeeper, node: &str) -> Result<zk::PersistentWatcher> {
    let client = zk.client().await?;
    zk.bounded(
        "a watch",
        client.watch(node, zk::AddWatchMode::PersistentRecursive),
    )
    .await
    .map_err(|e| super::classify("a watch", &e))
}

/// Whom an event of the name's records wakes on a channel of `event`:
/// `Some("")` every watch, `Some(id)` the waiter with that id (and every
/// observer), `None` nobody.
async fn woken(
    zk: &ZooKeeper,
    event: Event,
    name: &str,
    paths: &NamePaths,
    seen: &zk::WatchedEvent,
) -> Option<String> {
    let child = seen
        .path
        .strip_prefix(paths.node.as_str())?
        .strip_prefix('/')?;
    let lease = child == LOCK || child.starts_with(PERMIT_PREFIX);
    match (event, seen.event_type) {
        (Event::Granted, zk::EventType::NodeCreated) if lease => Some(String::new()),
        (Event::Released, zk::EventType::NodeDeleted) if child.starts_with(PERMIT_PREFIX) => {
            Some(String::new())
        }
        (Event::Released, zk::EventType::NodeDeleted)
            if child == LOCK || child == DELAY || child.starts_with(PLACE_PREFIX) =>
        {
            // Only the first in line can take a free name: that waiter,
            // read now (every watch when the name cannot be read). A
            // place gone (its waiter left, or was granted) is news only
            // when no lock holds the name: the next may take it.
            let Ok(children) = zk.children_of(name).await else {
                return Some(String::new());
            };
            if child.starts_with(PLACE_PREFIX) && children.iter().any(|c| c == LOCK) {
                return None;
            }
            Some(
                line(&children)
                    .first()
                    .map(|(token, _)| waiter_id(token).to_owned())
                    .unwrap_or_default(),
            )
        }
        _ => None,
    }
}
