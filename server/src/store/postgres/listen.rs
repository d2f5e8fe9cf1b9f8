//! The listening connection: one connection of its own (outside the pool)
//! that LISTENs on the schema's channel and turns each NOTIFY into a
//! wake-up of the local watches ([`Watchers`]), as the Redis store's
//! subscription does. Lost, it reconnects and LISTENs again, then wakes
//! every watch: events sent meanwhile were not seen.
//!
//! One channel carries every name's events (a per-name LISTEN would cost a
//! round trip per first watcher of a name, and PostgreSQL keeps no
//! per-channel filter cheaper than ours): the payload names the event and
//! the name (see schema.sql's header).

use std::{sync::Weak, time::Duration};

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio_postgres::{AsyncMessage, SimpleQueryMessage};

use super::{tls::Tls, Inner};
use crate::store::{
    watch::{SubscriptionRequest, Watchers},
    Event,
};

/// How often the listening connection is checked (a stalled server sends
/// no error, only silence), and how long to wait before reconnecting.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The watch key of `event` on `name` (what [`super::PostgresStore::channel`]
/// gives).
pub(super) fn channel(name: &str, event: Event) -> String {
    format!("{name}:{}", event.suffix())
}

/// Reads a NOTIFY payload `<r|g>:<waiter id or empty>:<name>`: the watch
/// key and the waiter to wake (empty: everyone). `None` for anything else.
fn parse(payload: &str) -> Option<(String, &str)> {
    let (event, rest) = payload.split_once(':')?;
    let (next, name) = rest.split_once(':')?;
    let event = match event {
        "r" => Event::Released,
        "g" => Event::Granted,
        _ => return None,
    };
    Some((channel(name, event), next))
}

/// Keeps the LISTEN up for as long as the store lives: connects, LISTENs,
/// forwards notifications, and starts again after a failure. `listening`
/// tells [`serve_subscriptions`] whether events reach us now.
pub(super) async fn run(
    store: Weak<Inner>,
    link: Link,
    watchers: Watchers,
    listening: watch::Sender<bool>,
) {
    let mut first = true;
    while store.strong_count() > 0 {
        match listen(&store, &link, &watchers, &listening, first).await {
            Ok(()) => return,
            Err(e) => {
                if listening.send_replace(false) {
                    tracing::warn!(error = %e, "PostgreSQL LISTEN connection lost; reconnecting");
                } else {
                    tracing::debug!(error = %e, "PostgreSQL LISTEN connection failed");
                }
                first = false;
            }
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

/// The check of the listening connection: it answers, and says whether
/// its server takes writes.
const CHECK: &str = "SHOW transaction_read_only";

/// Whether [`CHECK`]'s reply says the server takes no writes.
fn read_only(reply: &[SimpleQueryMessage]) -> bool {
    reply
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::Row(row) if row.get(0) == Some("on")))
}

/// How the listening connection reaches PostgreSQL, and what it listens
/// to.
pub(super) struct Link {
    pub config: tokio_postgres::Config,
    /// The URL asks for a server that takes writes
    /// (target_session_attrs=read-write: several servers, one primary).
    /// NOTIFYs come from the server that takes the writes, so a listening
    /// connection whose server stops taking them (a failover that left the
    /// old primary up, read-only) listens again, where the URL leads now.
    pub read_write: bool,
    pub tls: Tls,
    /// The schema, which names the channel.
    pub schema: String,
    pub timeout: Duration,
}

/// One connection's life: `Ok` when the store is gone, `Err` when the
/// connection failed.
async fn listen(
    store: &Weak<Inner>,
    link: &Link,
    watchers: &Watchers,
    listening: &watch::Sender<bool>,
    first: bool,
) -> Result<(), String> {
    let (schema, timeout) = (&link.schema, link.timeout);
    let connect = link.config.connect(link.tls.clone());
    let (client, mut connection) = tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let (tx, mut notifications) = mpsc::unbounded_channel();
    // Drives the connection: its notifications come from here.
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "PostgreSQL LISTEN connection ended");
                    return;
                }
            }
        }
    });
    let outcome = async {
        tokio::time::timeout(
            timeout,
            client.batch_execute(&format!("LISTEN \"{schema}\"")),
        )
        .await
        .map_err(|_| "LISTEN timed out".to_owned())?
        .map_err(|e| e.to_string())?;
        listening.send_replace(true);
        if !first {
            // Releases while we were not listening went unseen.
            watchers.wake_all();
        }
        let mut check = tokio::time::interval(CHECK_EVERY);
        loop {
            tokio::select! {
                notification = notifications.recv() => {
                    let Some(notification) = notification else {
                        return Err("the connection closed".to_owned());
                    };
                    if let Some((channel, next)) = parse(notification.payload()) {
                        watchers.wake(&channel, next);
                    }
                }
                _ = check.tick() => {
                    if store.strong_count() == 0 {
                        return Ok(());
                    }
                    let reply = tokio::time::timeout(timeout, client.simple_query(CHECK))
                        .await
                        .map_err(|_| "the LISTEN connection stalled".to_owned())?
                        .map_err(|e| e.to_string())?;
                    if link.read_write && read_only(&reply) {
                        return Err("the server takes no writes now (failed over?): \
                                    listening where the writes go"
                            .to_owned());
                    }
                }
            }
        }
    }
    .await;
    driver.abort();
    outcome
}

/// Answers the watch registry's subscription requests: one LISTEN covers
/// every name, so a subscription is confirmed as soon as (and only while)
/// the LISTEN is up, within the store timeout; a watch made while it is
/// down fails UNAVAILABLE, as on Redis.
pub(super) async fn serve_subscriptions(
    mut requests: mpsc::UnboundedReceiver<SubscriptionRequest>,
    mut listening: watch::Receiver<bool>,
    timeout: Duration,
) {
    while let Some(request) = requests.recv().await {
        if let SubscriptionRequest::Subscribe(_, ack) = request {
            let up = tokio::time::timeout(timeout, listening.wait_for(|up| *up)).await;
            let result = match up {
                Ok(Ok(_)) => Ok(()),
                _ => Err(crate::Error::Unavailable(
                    "PostgreSQL is unavailable: the LISTEN connection is down".into(),
                )),
            };
            let _ = ack.send(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_name_the_event_the_waiter_and_the_name() {
        assert_eq!(
            parse("r:0123456789abcdef:a:b"),
            Some(("a:b:released".to_owned(), "0123456789abcdef"))
        );
        assert_eq!(parse("g::x"), Some(("x:granted".to_owned(), "")));
        assert_eq!(parse("q::x"), None);
        assert_eq!(parse("r"), None);
    }
}
