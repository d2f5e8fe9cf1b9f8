//! The subscription task: the one place that subscribes and unsubscribes
//! the store's channels (the release and grant events that wake waiters),
//! so that requests reach Redis in the order watches made them, and a move
//! to a new server (a Sentinel failover, another Cluster node) carries every
//! watched channel with it. Also what the messages Redis pushes on the
//! subscription connection mean for the watches ([`deliver_push`]).

use std::{collections::HashSet, time::Duration};

use redis::{aio::ConnectionManager, PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::connect::bounded;
use crate::{
    error::Error,
    store::watch::{SubscriptionRequest, Watchers},
};

/// Wakes the watches a message pushed on the subscription connection
/// concerns (the connection's push sender calls it, for every push).
pub(super) fn deliver_push(watchers: &Watchers, push: &PushInfo) {
    match push.kind {
        PushKind::Message => {
            // data = [channel, message]; watches are keyed by channel,
            // and the message names the waiter to wake (release.lua).
            if let [Value::BulkString(channel), Value::BulkString(next), ..] = push.data.as_slice()
            {
                if let (Ok(channel), Ok(next)) =
                    (std::str::from_utf8(channel), std::str::from_utf8(next))
                {
                    watchers.wake(channel, next);
                }
            }
        }
        // Releases may have gone unseen while disconnected: every
        // waiter looks again (and fails fast if Redis is still down).
        PushKind::Disconnection => watchers.wake_all(),
        _ => {}
    }
}

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

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;
    use crate::store::watch::waiter_id;

    const T1: &str = "0123456789abcdef0123456789abcdef";
    const T2: &str = "fedcba9876543210fedcba9876543210";

    fn push(kind: PushKind, data: &[&str]) -> PushInfo {
        PushInfo {
            kind,
            data: data
                .iter()
                .map(|s| Value::BulkString(s.as_bytes().to_vec()))
                .collect(),
        }
    }

    /// A message wakes the waiter it names on its channel (and no other
    /// waiter, nor any watch of another channel); a disconnection wakes
    /// every watch; a subscription's confirmation wakes nobody.
    #[tokio::test]
    async fn pushes_wake_the_watches_they_concern() {
        let watchers = Watchers::new(None);
        let first = watchers.watch("c", Some(T1)).await.unwrap();
        let second = watchers.watch("c", Some(T2)).await.unwrap();
        let elsewhere = watchers.watch("d", Some(T1)).await.unwrap();
        let woken = |w: &crate::store::Watch| w.notified().now_or_never().is_some();

        deliver_push(&watchers, &push(PushKind::Message, &["c", waiter_id(T1)]));
        assert!(woken(&first));
        assert!(!woken(&second));
        assert!(!woken(&elsewhere));

        deliver_push(&watchers, &push(PushKind::Subscribe, &["c", waiter_id(T1)]));
        deliver_push(&watchers, &push(PushKind::Message, &["c"]));
        assert!(!woken(&first) && !woken(&second) && !woken(&elsewhere));

        deliver_push(&watchers, &push(PushKind::Disconnection, &[]));
        assert!(woken(&first) && woken(&second) && woken(&elsewhere));
    }
}
