//! The subscription task: the one place that subscribes and unsubscribes
//! the store's channels (the release and grant events that wake waiters),
//! so that requests reach Redis in the order watches made them, and a move
//! to a new server (a Sentinel failover, another Cluster node) carries every
//! watched channel with it.

use std::{collections::HashSet, time::Duration};

use redis::aio::ConnectionManager;
use tokio::sync::mpsc;

use super::connect::bounded;
use crate::{
    error::Error,
    store::watch::{SubscriptionRequest, Watchers},
};

/// Serves subscribe and unsubscribe requests in the order they were made,
/// on the subscription connection it was last given: when the primary moves
/// (Sentinel), the new connection is subscribed to every channel watched
/// now, and every watch looks again (events during the move went unseen).
pub(super) async fn run_subscriptions(
    mut requests: mpsc::UnboundedReceiver<SubscriptionRequest>,
    mut switches: mpsc::UnboundedReceiver<ConnectionManager>,
    timeout: Duration,
    watchers: Watchers,
) {
    let mut conn: Option<ConnectionManager> = None;
    let mut channels = HashSet::new();
    // Once nobody can send another connection (one server: the first was
    // the last), only requests are served.
    let mut more_switches = true;
    loop {
        let switch = async {
            if more_switches {
                switches.recv().await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            // A move first: later requests go to the new primary.
            biased;
            switched = switch => {
                let Some(mut new) = switched else {
                    more_switches = false;
                    continue;
                };
                if conn.is_some() {
                    for channel in &channels {
                        if let Err(e) = bounded("subscribe", timeout, new.subscribe(channel)).await {
                            // The manager resubscribes when it reconnects.
                            tracing::debug!(error = %e, "resubscribing on the new primary failed");
                        }
                    }
                    watchers.wake_all();
                }
                conn = Some(new);
            }
            request = requests.recv() => {
                let Some(request) = request else { return };
                match request {
                    SubscriptionRequest::Subscribe(channel, ack) => {
                        let result = match &mut conn {
                            Some(conn) => bounded("subscribe", timeout, conn.subscribe(&channel)).await,
                            None => Err(Error::Unavailable(
                                "no Redis primary known yet: the sentinels have not named one".into(),
                            )),
                        };
                        if result.is_ok() {
                            channels.insert(channel);
                        }
                        let _ = ack.send(result);
                    }
                    SubscriptionRequest::Unsubscribe(channel) => {
                        channels.remove(&channel);
                        if let Some(conn) = &mut conn {
                            if let Err(e) = bounded("unsubscribe", timeout, conn.unsubscribe(&channel)).await {
                                // Harmless: a stray subscription only delivers
                                // wake-ups nobody waits for, and is gone at the
                                // next reconnection.
                                tracing::debug!(error = %e, "unsubscribe failed");
                            }
                        }
                    }
                }
            }
        }
    }
}
