//! The etcd store's one Watch stream: a watcher per watched channel (a
//! name's releases, or its grants), each over the name's whole key range,
//! so that every event of the name reaches this replica in revision order,
//! and no event of a name nobody here watches does.
//!
//! What wakes whom:
//! * releases: the name's lock key deleted (released, revoked, expired),
//!   its lock-delay ended, or a place in its line gone (the first may have
//!   left): the waiter first in line now (read from etcd) and every
//!   observer; a permit gone: every watch (a permit may serve more than the
//!   first in line). A place deleted by the grant that took it is no news.
//! * grants: the lock key or a permit created.
//!
//! How it fails: a stream that breaks (etcd restarted, a member lost, the
//! store timeout passed without an answer to a create) is opened again,
//! on the next member of the URL (at once, then after a pause of 100 ms
//! doubling to 2 s while none answers), every channel watched anew, and
//! every watch woken, since events may have gone unseen meanwhile (a
//! spurious wake-up costs the waiter one look). A watcher etcd cancels
//! (its revision compacted) is made again, its watches woken. A subscribe
//! while etcd is unreachable fails at once, UNAVAILABLE.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use tokio::sync::{mpsc, oneshot};

use super::{
    client::{
        api::{
            etcdserverpb::{
                watch_request::RequestUnion, WatchCancelRequest, WatchCreateRequest, WatchRequest,
                WatchResponse,
            },
            mvccpb::{event::EventType, Event as EtcdEvent},
        },
        Client,
    },
    keys::{KeyKind, NameKeys},
};
use crate::{
    error::{Error, Result},
    store::{
        watch::{parse_name_channel as parse, waiter_id, SubscriptionRequest, Watchers},
        Event,
    },
};

/// Messages queued for etcd on the stream at most.
const OUTGOING: usize = 256;

/// The state of the task: the channels watched, by the id of their etcd
/// watcher (the task chooses the ids, etcd 3.4 takes them).
#[derive(Default)]
struct Channels {
    by_channel: HashMap<String, i64>,
    by_id: HashMap<i64, String>,
    /// Watchers etcd confirmed on the current stream.
    confirmed: HashSet<i64>,
    /// Subscribes waiting for etcd's confirmation, by watcher id.
    acks: HashMap<i64, Vec<oneshot::Sender<Result<()>>>>,
    /// When each watcher's create was asked for.
    asked: HashMap<i64, Instant>,
    next_id: i64,
}

impl Channels {
    /// Gives `channel` a new watcher id.
    fn assign(&mut self, channel: &str) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        if let Some(old) = self.by_channel.insert(channel.to_owned(), id) {
            self.by_id.remove(&old);
            self.confirmed.remove(&old);
            self.asked.remove(&old);
            if let Some(acks) = self.acks.remove(&old) {
                self.acks.entry(id).or_default().extend(acks);
            }
        }
        self.by_id.insert(id, channel.to_owned());
        self.asked.insert(id, Instant::now());
        id
    }

    /// Whether etcd has left a subscribe unconfirmed for longer than
    /// `timeout` (whose caller gave up on it): a stalled stream.
    fn stalled(&self, timeout: Duration) -> bool {
        self.acks
            .keys()
            .filter_map(|id| self.asked.get(id))
            .any(|at| at.elapsed() > timeout)
    }

    /// Fails every subscribe still waiting.
    fn fail_acks(&mut self, why: &str) {
        for (id, acks) in self.acks.drain() {
            for ack in acks {
                let _ = ack.send(Err(Error::Unavailable(why.to_owned())));
            }
            // Never confirmed: its watches are gone or will retry.
            self.asked.remove(&id);
            if let Some(channel) = self.by_id.remove(&id) {
                self.by_channel.remove(&channel);
            }
        }
    }
}

/// The create request of `channel`'s watcher `id`.
fn create(prefix: &str, channel: &str, id: i64) -> Option<WatchRequest> {
    let (_, name) = parse(channel)?;
    let (key, range_end) = NameKeys::new(prefix, name).all();
    Some(WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key,
            range_end,
            watch_id: id,
            ..WatchCreateRequest::default()
        })),
    })
}

fn cancel(id: i64) -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::CancelRequest(WatchCancelRequest {
            watch_id: id,
        })),
    }
}

/// Runs the stream until the store is dropped (its requests end).
pub(super) async fn run(
    client: Client,
    prefix: String,
    watchers: Watchers,
    mut requests: mpsc::UnboundedReceiver<SubscriptionRequest>,
) {
    let mut channels = Channels::default();
    let mut pause = Duration::from_millis(100);
    let mut reopened = false;
    loop {
        // Nothing to watch: no stream until something is.
        if channels.by_channel.is_empty() {
            match requests.recv().await {
                Some(SubscriptionRequest::Subscribe(channel, ack)) => {
                    let id = channels.assign(&channel);
                    channels.acks.entry(id).or_default().push(ack);
                }
                Some(SubscriptionRequest::Unsubscribe(_)) => continue,
                None => return,
            }
        }
        let (outgoing, outgoing_rx) = mpsc::channel(OUTGOING);
        let mut creates: Vec<WatchRequest> = channels
            .by_channel
            .iter()
            .filter_map(|(channel, id)| create(&prefix, channel, *id))
            .collect();
        // The first before the call (etcd answers the call's headers once a
        // request came), the rest fed while the answers are read below: a
        // queue of its own would hold only so many.
        let rest = creates.split_off(creates.len().min(1));
        if let Some(first) = creates.pop() {
            let _ = outgoing.try_send(first);
        }
        let (mut incoming, member) = match client.watch(outgoing_rx).await {
            Ok(opened) => {
                let feed = outgoing.clone();
                tokio::spawn(async move {
                    for create in rest {
                        if feed.send(create).await.is_err() {
                            return;
                        }
                    }
                });
                opened
            }
            Err(e) => {
                let why = e.to_string();
                channels.fail_acks(&why);
                if reopened {
                    watchers.wake_all();
                }
                reopened = true;
                tracing::debug!(error = %why, "etcd store: cannot open the watch stream");
                // Meanwhile a subscribe fails at once, as the store is down.
                let pause_over = tokio::time::sleep(pause);
                tokio::pin!(pause_over);
                loop {
                    tokio::select! {
                        () = &mut pause_over => break,
                        request = requests.recv() => match request {
                            Some(SubscriptionRequest::Subscribe(_, ack)) => {
                                let _ = ack.send(Err(Error::Unavailable(why.clone())));
                            }
                            Some(SubscriptionRequest::Unsubscribe(channel)) => {
                                if let Some(id) = channels.by_channel.remove(&channel) {
                                    channels.by_id.remove(&id);
                                }
                            }
                            None => return,
                        },
                    }
                }
                pause = (pause * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        if reopened {
            // Events may have gone unseen while the stream was down.
            watchers.wake_all();
        }
        reopened = true;
        let mut tick = tokio::time::interval(client.timeout());
        let broken = loop {
            tokio::select! {
                _ = tick.tick() => {
                    if channels.stalled(client.timeout()) {
                        break "etcd did not confirm a watch within the store timeout".to_owned();
                    }
                    // Another call found this member failed: its events may
                    // stop coming, so watch on the member in use.
                    if !client.uses(&member) {
                        break "the store moved to another member".to_owned();
                    }
                }
                request = requests.recv() => match request {
                    Some(SubscriptionRequest::Subscribe(channel, ack)) => {
                        match channels.by_channel.get(&channel).copied() {
                            Some(id) if channels.confirmed.contains(&id) => {
                                let _ = ack.send(Ok(()));
                            }
                            Some(id) => channels.acks.entry(id).or_default().push(ack),
                            None => {
                                let id = channels.assign(&channel);
                                channels.acks.entry(id).or_default().push(ack);
                                let Some(create) = create(&prefix, &channel, id) else {
                                    continue;
                                };
                                if outgoing.send(create).await.is_err() {
                                    break "the stream closed".to_owned();
                                }
                            }
                        }
                    }
                    Some(SubscriptionRequest::Unsubscribe(channel)) => {
                        if let Some(id) = channels.by_channel.remove(&channel) {
                            channels.by_id.remove(&id);
                            channels.confirmed.remove(&id);
                            if outgoing.send(cancel(id)).await.is_err() {
                                break "the stream closed".to_owned();
                            }
                        }
                    }
                    None => return,
                },
                message = incoming.message() => match message {
                    Ok(Some(response)) => {
                        pause = Duration::from_millis(100);
                        if let Some(why) = answer(&client, &prefix, &watchers, &mut channels, &outgoing, response).await {
                            break why;
                        }
                    }
                    Ok(None) => break "etcd ended the watch stream".to_owned(),
                    Err(status) => break status.message().to_owned(),
                },
            }
        };
        tracing::debug!(error = %broken, "etcd store: the watch stream broke; opening it again");
        client.failed(&member);
        channels.confirmed.clear();
        channels.fail_acks(&format!("etcd's watch stream broke: {broken}"));
        // Every channel gets a new watcher on the new stream.
        let watched: Vec<String> = channels.by_channel.keys().cloned().collect();
        for channel in watched {
            channels.assign(&channel);
        }
    }
}

/// Handles one answer of etcd on the stream; `Some(why)` if the stream
/// must be opened again.
async fn answer(
    client: &Client,
    prefix: &str,
    watchers: &Watchers,
    channels: &mut Channels,
    outgoing: &mpsc::Sender<WatchRequest>,
    response: WatchResponse,
) -> Option<String> {
    let id = response.watch_id;
    if response.created {
        channels.confirmed.insert(id);
        channels.asked.remove(&id);
        for ack in channels.acks.remove(&id).unwrap_or_default() {
            let _ = ack.send(Ok(()));
        }
    }
    if response.canceled {
        // Not by us (an unsubscribed id is forgotten first): compacted, or
        // refused. Watched again, its watches woken.
        if let Some(channel) = channels.by_id.get(&id).cloned() {
            tracing::debug!(reason = %response.cancel_reason, "etcd store: a watcher was cancelled; watching again");
            let new = channels.assign(&channel);
            watchers.wake(&channel, "");
            if let Some(create) = create(prefix, &channel, new) {
                if outgoing.send(create).await.is_err() {
                    return Some("the stream closed".into());
                }
            }
        }
        return None;
    }
    if response.events.is_empty() {
        return None;
    }
    // An event of a watcher no longer ours (unsubscribed) is no news.
    let channel = channels.by_id.get(&id)?;
    let (event, name) = parse(channel)?;
    let keys = NameKeys::new(prefix, name);
    match event {
        Event::Granted => {
            let granted = response.events.iter().any(|e| {
                e.r#type() == EventType::Put
                    && e.kv.as_ref().is_some_and(|kv| {
                        kv.version == 1
                            && matches!(keys.kind(&kv.key), Some(KeyKind::Lock | KeyKind::Slot))
                    })
            });
            if granted {
                watchers.wake(channel, "");
            }
        }
        Event::Released => match released(&keys, &response.events) {
            Wake::Nobody => {}
            Wake::Everyone => watchers.wake(channel, ""),
            Wake::FirstInLine => {
                // Read after the event: whoever is first now.
                let (client, watchers, channel) =
                    (client.clone(), watchers.clone(), channel.clone());
                let places = keys.places();
                let keys = keys.clone();
                tokio::spawn(async move {
                    let first = client
                        .range("Range (first in line)", super::first_in_line(places))
                        .await;
                    let first = first
                        .ok()
                        .and_then(|r| r.kvs.into_iter().next())
                        .map(|kv| kv.key);
                    match first.as_deref().and_then(|key| keys.token_of(key)) {
                        Some(token) => watchers.wake(&channel, waiter_id(token)),
                        None => watchers.wake(&channel, ""),
                    }
                });
            }
        },
    }
    None
}

/// Whom a batch of a name's events wakes among its release watches.
#[derive(Debug, PartialEq, Eq)]
enum Wake {
    Nobody,
    FirstInLine,
    Everyone,
}

fn released(keys: &NameKeys, events: &[EtcdEvent]) -> Wake {
    let kind = |e: &EtcdEvent| e.kv.as_ref().and_then(|kv| keys.kind(&kv.key));
    let granted = events.iter().any(|e| {
        e.r#type() == EventType::Put && matches!(kind(e), Some(KeyKind::Lock | KeyKind::Slot))
    });
    let mut wake = Wake::Nobody;
    for e in events.iter().filter(|e| e.r#type() == EventType::Delete) {
        match kind(e) {
            Some(KeyKind::Slot) => return Wake::Everyone,
            Some(KeyKind::Lock | KeyKind::Delay) => wake = Wake::FirstInLine,
            Some(KeyKind::Place) if !granted => wake = Wake::FirstInLine,
            _ => {}
        }
    }
    wake
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::etcd::client::api::mvccpb::KeyValue;

    fn event(kind: EventType, key: Vec<u8>) -> EtcdEvent {
        EtcdEvent {
            r#type: kind.into(),
            kv: Some(KeyValue {
                key,
                ..KeyValue::default()
            }),
            prev_kv: None,
        }
    }

    /// A release, a revoke or an expiry wakes the first in line; a grant
    /// that took the first place wakes nobody; a permit gone wakes all.
    #[test]
    fn what_wakes_whom() {
        let keys = NameKeys::new("p:", "a");
        use EventType::{Delete, Put};
        assert_eq!(
            released(&keys, &[event(Delete, keys.lock())]),
            Wake::FirstInLine
        );
        assert_eq!(
            released(&keys, &[event(Delete, keys.delay())]),
            Wake::FirstInLine
        );
        assert_eq!(
            released(&keys, &[event(Delete, keys.place("w"))]),
            Wake::FirstInLine
        );
        assert_eq!(
            released(
                &keys,
                &[event(Put, keys.lock()), event(Delete, keys.place("w"))]
            ),
            Wake::Nobody
        );
        assert_eq!(
            released(&keys, &[event(Delete, keys.slot(1))]),
            Wake::Everyone
        );
        assert_eq!(
            released(&keys, &[event(Delete, keys.record("t"))]),
            Wake::Nobody
        );
        assert_eq!(released(&keys, &[event(Put, keys.lock())]), Wake::Nobody);
    }
}
