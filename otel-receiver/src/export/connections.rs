//! The Prometheus endpoint's open connections: a cap, a reserve kept free for new ones, and
//! eviction of the oldest connection still waiting for its request head.
//!
//! Why this exists: a cap that makes new connections wait (a semaphore before `accept`, or
//! tower's `ConcurrencyLimit`) lets a few hundred slow clients, each dripping a request head one
//! byte at a time, hold every slot while `/healthz` and `/metrics` wait in the listen backlog; the
//! kubelet then restarts a healthy agent. hyper bounds each connection's head
//! (`header_read_timeout`) but not how many connections are open, and its `graceful_shutdown`
//! closes a connection at once only when it has received nothing; one holding half a head is
//! left to its timeout. So every accepted connection is registered here: once
//! `max_connections - reserved_connections` are open, each new one evicts the oldest connection
//! that has not yet delivered a whole request head. A slow client is the oldest by construction
//! (a real client's head arrives within a round trip), so a probe always gets in, and a
//! connection whose request is being answered is never cut. Past `max_connections` (all of
//! them mid-response, nothing to evict) a new connection is closed as soon as it is accepted:
//! `accept` itself never waits.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

/// The open connections, in the order they were accepted.
#[derive(Debug, Clone)]
pub(crate) struct Connections {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    /// Open at once, at most.
    max_connections: usize,
    /// From this many open on, a new connection evicts the oldest waiting one.
    evict_from: usize,
    next_id: u64,
    /// Connections still waiting for (or reading) a request head, oldest first; dropping or
    /// firing a sender evicts its connection.
    waiting: BTreeMap<u64, oneshot::Sender<()>>,
    /// Connections whose request is being answered: never evicted. Their senders are kept so
    /// that their `Evicted` stays pending.
    busy: BTreeMap<u64, oneshot::Sender<()>>,
}

impl Inner {
    fn open(&self) -> usize {
        self.waiting.len() + self.busy.len()
    }
}

/// A connection's place among the open ones; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Ticket {
    inner: Arc<Mutex<Inner>>,
    id: u64,
}

/// Resolves when the connection has been evicted to make room for a newer one.
#[derive(Debug)]
pub(crate) struct Evicted(oneshot::Receiver<()>);

impl Connections {
    /// At most `max_connections` open (at least 1); from `max_connections -
    /// reserved_connections` open on (at least 1), a new connection evicts the oldest waiting one.
    pub(crate) fn new(max_connections: usize, reserved_connections: usize) -> Connections {
        let max_connections = max_connections.max(1);
        let evict_from = max_connections.saturating_sub(reserved_connections).max(1);
        Connections {
            inner: Arc::new(Mutex::new(Inner {
                max_connections,
                evict_from,
                next_id: 0,
                waiting: BTreeMap::new(),
                busy: BTreeMap::new(),
            })),
        }
    }

    /// Registers a connection just accepted, evicting the oldest one still waiting for its
    /// request head if the reserve is reached; `None` if every place is taken by a connection
    /// mid-response (close the new one).
    pub(crate) fn admit(&self) -> Option<(Ticket, Evicted)> {
        let mut inner = lock(&self.inner);
        if inner.open() >= inner.evict_from {
            if let Some((id, evict)) = inner.waiting.pop_first() {
                // The receiver may be gone with its task already; either way the place is free.
                let _ = evict.send(());
                tracing::debug!(
                    connection = id,
                    open = inner.open(),
                    "evicted the oldest connection waiting for a request head"
                );
            }
        }
        if inner.open() >= inner.max_connections {
            tracing::debug!(
                open = inner.open(),
                "every connection is mid-response; closing a new one"
            );
            return None;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let (evict, evicted) = oneshot::channel();
        inner.waiting.insert(id, evict);
        Some((
            Ticket {
                inner: self.inner.clone(),
                id,
            },
            Evicted(evicted),
        ))
    }

    /// (open, waiting for a request head)
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let inner = lock(&self.inner);
        (inner.open(), inner.waiting.len())
    }
}

impl Ticket {
    /// A whole request head has arrived: the connection is answering it and is no longer
    /// evicted. A no-op once evicted.
    pub(crate) fn busy(&self) {
        let mut inner = lock(&self.inner);
        if let Some(evict) = inner.waiting.remove(&self.id) {
            inner.busy.insert(self.id, evict);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut inner = lock(&self.inner);
        inner.waiting.remove(&self.id);
        inner.busy.remove(&self.id);
    }
}

impl Future for Evicted {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // Sent or dropped, the place is gone.
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}

#[cfg(test)]
impl Evicted {
    fn fired(&mut self) -> bool {
        !matches!(self.0.try_recv(), Err(oneshot::error::TryRecvError::Empty))
    }
}

/// The registry is a few maps changed in single steps, whole after a panic elsewhere: a
/// poisoned lock is used as it is rather than taking the endpoint down.
fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit_n(c: &Connections, n: usize) -> Vec<(Ticket, Evicted)> {
        (0..n).map(|_| c.admit().expect("admitted")).collect()
    }

    #[test]
    fn below_the_reserve_nothing_is_evicted() {
        let c = Connections::new(8, 2);
        let mut open = admit_n(&c, 6);
        assert_eq!(c.counts(), (6, 6));
        assert!(open.iter_mut().all(|(_, e)| !e.fired()));
    }

    #[test]
    fn at_the_reserve_each_new_connection_evicts_the_oldest_waiting_one() {
        let c = Connections::new(8, 2);
        let mut open = admit_n(&c, 6);
        let mut seventh = c.admit().expect("admitted");
        assert!(open[0].1.fired(), "the oldest is evicted");
        assert!(open[1..].iter_mut().all(|(_, e)| !e.fired()));
        assert!(!seventh.1.fired());
        // The evicted one's place is free at once: 6 open, the newest included; its task
        // dropping the ticket later changes nothing.
        assert_eq!(c.counts(), (6, 6));
        open.remove(0);
        assert_eq!(c.counts(), (6, 6));
        let _eighth = c.admit().expect("admitted");
        assert!(open[0].1.fired(), "then the next oldest");
        assert_eq!(c.counts(), (6, 6));
    }

    #[test]
    fn a_connection_mid_response_is_never_evicted() {
        let c = Connections::new(8, 2);
        let mut open = admit_n(&c, 6);
        open[0].0.busy();
        open[1].0.busy();
        assert_eq!(c.counts(), (6, 4));
        let _new = c.admit().expect("admitted");
        assert!(!open[0].1.fired() && !open[1].1.fired(), "busy ones stay");
        assert!(open[2].1.fired(), "the oldest waiting one goes");
        assert_eq!(c.counts(), (6, 4));
    }

    #[test]
    fn the_reserve_admits_new_connections_while_all_are_mid_response_then_they_are_refused() {
        let c = Connections::new(8, 2);
        let mut open = admit_n(&c, 6);
        open.iter().for_each(|(t, _)| t.busy());
        // Nothing to evict: the reserve's two places take the 7th and the 8th.
        let seventh = c.admit().expect("the reserve");
        seventh.0.busy();
        let eighth = c.admit().expect("the reserve");
        eighth.0.busy();
        assert_eq!(c.counts(), (8, 0));
        assert!(c.admit().is_none(), "the 9th is refused");
        assert_eq!(c.counts(), (8, 0));
        assert!(open.iter_mut().all(|(_, e)| !e.fired()));
        // One finishes: its place is free again.
        open.pop();
        assert!(c.admit().is_some());
    }

    #[test]
    fn a_waiting_connection_in_the_reserve_is_evicted_for_a_new_one_at_the_cap() {
        let c = Connections::new(8, 2);
        let open = admit_n(&c, 6);
        open.iter().for_each(|(t, _)| t.busy());
        let mut seventh = c.admit().expect("the reserve");
        let _eighth = c.admit().expect("evicts the 7th, still waiting");
        assert!(seventh.1.fired());
        assert_eq!(c.counts(), (7, 1), "6 mid-response and the 8th");
        drop(seventh);
        assert_eq!(c.counts(), (7, 1));
    }

    #[test]
    fn dropped_tickets_free_their_places_busy_or_not() {
        let c = Connections::new(4, 1);
        let open = admit_n(&c, 3);
        open[1].0.busy();
        assert_eq!(c.counts(), (3, 2));
        drop(open);
        assert_eq!(c.counts(), (0, 0));
    }

    #[test]
    fn busy_after_eviction_changes_nothing() {
        let c = Connections::new(2, 1);
        let mut first = c.admit().expect("admitted");
        let _second = c.admit().expect("admitted");
        assert!(first.1.fired());
        first.0.busy();
        assert_eq!(c.counts(), (1, 1));
    }

    #[test]
    fn a_reserve_as_large_as_the_cap_still_keeps_one_waiting_connection() {
        let c = Connections::new(3, 3);
        let mut first = c.admit().expect("admitted");
        assert_eq!(c.counts(), (1, 1));
        let _second = c.admit().expect("admitted");
        assert!(first.1.fired(), "from 1 open on, each new one evicts");
        let zero = Connections::new(0, 0);
        let _only = zero.admit().expect("a cap of 0 is 1");
        assert_eq!(zero.counts(), (1, 1));
    }

    #[tokio::test]
    async fn evicted_resolves_when_the_connection_is_evicted() {
        let c = Connections::new(2, 1);
        let (_first, evicted) = c.admit().expect("admitted");
        let _second = c.admit().expect("admitted");
        let done = tokio::time::timeout(std::time::Duration::from_secs(1), evicted).await;
        assert!(done.is_ok());
    }
}
