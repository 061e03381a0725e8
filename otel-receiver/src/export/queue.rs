//! The sending queue of the OTLP exports, one per signal: what a collection produced (metrics)
//! or a change of verdict announced (log records) waits here until the sender delivers it, so
//! that a collector that is down, throttling or restarting costs a delay, not the data. Bounded
//! in bytes: when a new batch would not fit, the oldest batches go, and the caller counts them
//! as dropped. The OpenTelemetry Collector's sending queue is the model; this one is in memory
//! only.
//!
//! A batch waits **encoded**, as the protobuf it will be sent as (before compression), so that
//! the bound counts what the queue really holds: the bytes of its buffers. Held decoded, as
//! prost structures (a `String` and a `Vec` per attribute, each a heap allocation of its own),
//! the same batches took 4.4 times their encoded size, and a full 64 MiB queue grew the agent
//! to 287 MB (docs/benchmarks.md, "The sending queue's memory"). Encoded, a batch is decoded
//! only when it must be cut in two (an intake refused its size) or sent over gRPC, one batch
//! at a time.
//!
//! The queue, the sender and its retries are written once over [`Payload`], the request type
//! of a signal: the metrics' `ExportMetricsServiceRequest`, the logs' `ExportLogsServiceRequest`
//! (both implemented in `otlp/payload.rs`, beside their halving).

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::delivery::{QueueLevel, Signal};

/// What a signal's export request must offer the queue and the sender: how many items
/// (points, records) it carries, a way to cut it in two when an intake refuses it as too
/// large, and how two encoded requests join.
pub trait Payload: prost::Message + Clone + Default + Send + 'static {
    /// The signal its items are counted under.
    const SIGNAL: Signal;
    /// The OTLP/HTTP path of the signal (`v1/metrics`, `v1/logs`).
    const HTTP_PATH: &'static str;

    /// Data points (metrics) or log records (logs) in the request.
    fn items(&self) -> u64;

    /// The request cut into two with about half the items each, or `None` when it holds a
    /// single item (which no split makes smaller).
    fn halve(&self) -> Option<(Self, Self)>;

    /// Takes `other`'s items into this request, or gives `other` back when the two cannot
    /// travel as one.
    fn absorb(&mut self, other: Self) -> Result<(), Self>;

    /// Joins the encoded request `other` to the encoded request `into`. What waits while the
    /// collector is away or the sender backs off joins the last waiting batch (as the
    /// Collector's sending queue merges requests), so that a backlog leaves in few requests
    /// rather than one per collection or record. By default the two are decoded, joined by
    /// [`absorb`](Payload::absorb) and encoded again; a request whose only field is a repeated
    /// one (the metrics') joins by concatenation, which protobuf defines as the same thing.
    fn join_encoded(into: &mut Vec<u8>, other: &[u8]) -> bool {
        let (Ok(mut joined), Ok(other)) = (Self::decode(&into[..]), Self::decode(other)) else {
            return false;
        };
        if joined.absorb(other).is_err() {
            return false;
        }
        let mut encoded = Vec::with_capacity(joined.encoded_len());
        if joined.encode(&mut encoded).is_err() {
            return false;
        }
        *into = encoded;
        true
    }
}

/// One export's worth of items, encoded, and the windows it is the first to carry.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch<R> {
    /// The request as protobuf, before compression: what the queue holds of it.
    pub encoded: Vec<u8>,
    /// Points or records.
    pub items: u64,
    /// Windows counted delivered when this batch is (always 0 for logs).
    pub windows: u64,
    request: PhantomData<fn() -> R>,
}

impl<R: Payload> Batch<R> {
    /// The batch of `request`, encoded now; the request itself is not kept.
    pub fn new(request: R, windows: u64) -> Batch<R> {
        let items = request.items();
        Batch::encoded(request.encode_to_vec(), items, windows)
    }

    /// A batch of a request encoded already, holding `items`.
    pub fn encoded(encoded: Vec<u8>, items: u64, windows: u64) -> Batch<R> {
        Batch {
            encoded,
            items,
            windows,
            request: PhantomData,
        }
    }

    /// Its size: the protobuf's length, and the memory its buffer holds (a buffer is never
    /// larger than what it holds: `encode_to_vec` and [`Payload::join_encoded`] reserve
    /// exactly).
    pub fn bytes(&self) -> usize {
        self.encoded.capacity().max(self.encoded.len())
    }

    /// The request, decoded (to be halved, or sent over gRPC).
    pub fn request(&self) -> Result<R, prost::DecodeError> {
        R::decode(&self.encoded[..])
    }
}

#[derive(Debug)]
struct State<R> {
    batches: VecDeque<Batch<R>>,
    bytes: usize,
    /// Batches taken by the sender and not yet settled (delivered, dropped or put back).
    in_flight: usize,
}

/// A FIFO of batches, at most `max_bytes` in all (a single batch larger than that is kept alone).
#[derive(Debug)]
pub struct SendQueue<R> {
    state: Mutex<State<R>>,
    ready: Condvar,
    max_bytes: usize,
    /// What it holds, published after each change for the agent's gauge.
    level: Arc<QueueLevel>,
}

impl<R: Payload> SendQueue<R> {
    pub fn new(max_bytes: usize) -> SendQueue<R> {
        SendQueue {
            state: Mutex::new(State {
                batches: VecDeque::new(),
                bytes: 0,
                in_flight: 0,
            }),
            ready: Condvar::new(),
            max_bytes,
            level: Arc::new(QueueLevel::new(max_bytes)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<R>> {
        // A poisoned lock only means a panic elsewhere mid-update: the queue is still a queue.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes what `state` holds, before its lock is let go.
    fn publish(&self, state: &State<R>) {
        self.level.set(state.batches.len(), state.bytes);
    }

    /// What the queue holds, kept current as it changes (`gpuslack.agent.queue.*`).
    pub fn level(&self) -> Arc<QueueLevel> {
        self.level.clone()
    }

    /// Adds `batch` at the back; returns the batches that made room for it, oldest first.
    pub fn push(&self, batch: Batch<R>) -> Vec<Batch<R>> {
        let mut state = self.lock();
        let evicted = Self::make_room(&mut state, batch.bytes(), self.max_bytes);
        state.bytes += batch.bytes();
        state.batches.push_back(batch);
        self.publish(&state);
        drop(state);
        self.ready.notify_all();
        evicted
    }

    /// Adds `batch` to the last waiting batch when the two join ([`Payload::join_encoded`]) and
    /// stay within `max_request_bytes`, else at the back as [`push`](SendQueue::push) does;
    /// returns the batches that made room for it, oldest first.
    pub fn push_joined(&self, batch: Batch<R>, max_request_bytes: usize) -> Vec<Batch<R>> {
        let mut state = self.lock();
        let evicted = Self::make_room(&mut state, batch.bytes(), self.max_bytes);
        let joins = state
            .batches
            .back()
            .is_some_and(|last| last.encoded.len() + batch.encoded.len() <= max_request_bytes);
        let mut joined = false;
        if let Some(last) = state.batches.back_mut().filter(|_| joins) {
            let before = last.bytes();
            if R::join_encoded(&mut last.encoded, &batch.encoded) {
                last.windows += batch.windows;
                last.items += batch.items;
                let after = last.bytes();
                state.bytes = state.bytes - before + after;
                joined = true;
            }
        }
        if !joined {
            state.bytes += batch.bytes();
            state.batches.push_back(batch);
        }
        self.publish(&state);
        drop(state);
        self.ready.notify_all();
        evicted
    }

    /// Evicts the oldest batches until `bytes` more fit under `max_bytes` (or none is left).
    fn make_room(state: &mut State<R>, bytes: usize, max_bytes: usize) -> Vec<Batch<R>> {
        let mut evicted = Vec::new();
        while !state.batches.is_empty() && state.bytes + bytes > max_bytes {
            if let Some(old) = state.batches.pop_front() {
                state.bytes -= old.bytes();
                evicted.push(old);
            }
        }
        evicted
    }

    /// Puts a batch the sender took back at the front (its send failed and will be retried),
    /// or the parts of a batch that was split, in order.
    pub fn push_front(&self, batches: Vec<Batch<R>>) {
        let mut state = self.lock();
        for b in batches.into_iter().rev() {
            state.bytes += b.bytes();
            state.batches.push_front(b);
        }
        self.publish(&state);
    }

    /// Takes the oldest batch, waiting up to `wait` for one; the taker calls [`settle`]
    /// once it is done with it (after putting it or its parts back, if it does).
    ///
    /// [`settle`]: SendQueue::settle
    pub fn pop(&self, wait: Duration) -> Option<Batch<R>> {
        let deadline = Instant::now() + wait;
        let mut state = self.lock();
        loop {
            if let Some(b) = state.batches.pop_front() {
                state.bytes -= b.bytes();
                state.in_flight += 1;
                self.publish(&state);
                return Some(b);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            state = match self.ready.wait_timeout(state, left) {
                Ok((s, _)) => s,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// A batch [`pop`](SendQueue::pop) gave is settled.
    pub fn settle(&self) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
    }

    /// Nothing waits and nothing is being sent.
    pub fn idle(&self) -> bool {
        let state = self.lock();
        state.batches.is_empty() && state.in_flight == 0
    }

    /// Takes every batch left (at shutdown, to count them).
    pub fn drain(&self) -> Vec<Batch<R>> {
        let mut state = self.lock();
        state.bytes = 0;
        let left = state.batches.drain(..).collect();
        self.publish(&state);
        left
    }

    /// Batches and bytes waiting.
    pub fn len(&self) -> (usize, usize) {
        let state = self.lock();
        (state.batches.len(), state.bytes)
    }

    pub fn is_empty(&self) -> bool {
        self.len().0 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use prost::Message as _;

    /// A metrics batch of `bytes` bytes (metrics batches join by concatenation, never decoded
    /// by the queue).
    fn batch(bytes: usize, windows: u64) -> Batch<ExportMetricsServiceRequest> {
        Batch::encoded(vec![0; bytes], 1, windows)
    }

    #[test]
    fn the_level_follows_every_change_and_reads_as_the_agents_gauge() {
        use crate::export::catalogue::{AGENT_QUEUE_BATCHES, AGENT_QUEUE_LIMIT, AGENT_QUEUE_USAGE};
        use crate::export::delivery::{Delivery, QueueHeld};
        let q = SendQueue::new(1000);
        let delivery = Delivery::default();
        delivery.watch_queue(Signal::Metrics, q.level());
        let held = |d: &Delivery| d.counts().queues.get(&Signal::Metrics).copied();
        let at = |batches, bytes| QueueHeld {
            batches,
            bytes,
            max_bytes: 1000,
        };
        assert_eq!(held(&delivery), Some(at(0, 0)));
        q.push(batch(400, 1));
        q.push(batch(300, 1));
        assert_eq!(held(&delivery), Some(at(2, 700)));
        // Past the bound: the oldest goes, and the level says what is left.
        q.push(batch(500, 1));
        assert_eq!(held(&delivery), Some(at(2, 800)));
        let b = q.pop(Duration::ZERO).expect("a batch");
        assert_eq!(held(&delivery), Some(at(1, 500)));
        q.push_front(vec![b]);
        assert_eq!(held(&delivery), Some(at(2, 800)));
        q.drain();
        assert_eq!(held(&delivery), Some(at(0, 0)));
        q.push(batch(250, 1));
        let points = crate::export::points::agent_points(&delivery.counts());
        let value = |def| {
            points
                .iter()
                .find(|p| p.def == def && p.attributes == [("signal", "metrics".to_string())])
                .map(|p| p.value)
        };
        assert_eq!(value(AGENT_QUEUE_USAGE), Some(250.0));
        assert_eq!(value(AGENT_QUEUE_LIMIT), Some(1000.0));
        assert_eq!(value(AGENT_QUEUE_BATCHES), Some(1.0));
    }

    /// A logs request of one resource and scope holding `records` records of `text`.
    fn logs(records: usize, text: &str) -> ExportLogsServiceRequest {
        use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue};
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: (0..records)
                        .map(|_| LogRecord {
                            body: Some(AnyValue {
                                value: Some(Value::StringValue(text.into())),
                            }),
                            ..LogRecord::default()
                        })
                        .collect(),
                    ..ScopeLogs::default()
                }],
                ..ResourceLogs::default()
            }],
        }
    }

    #[test]
    fn waiting_records_join_the_last_batch_up_to_the_request_limit() {
        let q = SendQueue::new(10_000);
        let one = Batch::new(logs(1, &"x".repeat(90)), 0);
        // One record is about 100 bytes; joined, records share their resource and scope, so
        // three take less than three times one.
        assert!((95..=110).contains(&one.bytes()), "{} bytes", one.bytes());
        for _ in 0..4 {
            assert!(q.push_joined(one.clone(), 320).is_empty());
        }
        let (batches, bytes) = q.len();
        let three = logs(3, &"x".repeat(90)).encoded_len();
        assert!(three < 3 * one.bytes());
        // Three join under a limit of 320 (the sum of the parts, checked before joining), the
        // fourth does not; the queue counts exactly what it holds.
        assert_eq!((batches, bytes), (2, three + one.bytes()));
        let first = q.pop(Duration::ZERO).expect("a batch");
        assert_eq!((first.items, first.bytes()), (3, three));
        let request = first.request().expect("decodes");
        assert_eq!(request.resource_logs.len(), 1);
        assert_eq!(request.resource_logs[0].scope_logs[0].log_records.len(), 3);
        let second = q.pop(Duration::ZERO).expect("a batch");
        assert_eq!(second.items, 1);
        // A batch being sent is not joined: the next record starts a batch of its own.
        assert!(q.is_empty());
        q.push_joined(one.clone(), 320);
        let taken = q.pop(Duration::ZERO).expect("a batch");
        q.push_joined(one.clone(), 320);
        assert_eq!((taken.items, q.len().0), (1, 1));
        // Metrics batches join too, with the windows they carry, up to the limit.
        let m = SendQueue::new(10_000);
        m.push_joined(batch(10, 1), 25);
        m.push_joined(batch(10, 2), 25);
        m.push_joined(batch(10, 4), 25);
        assert_eq!(m.len(), (2, 30));
        let joined = m.pop(Duration::ZERO).expect("a batch");
        assert_eq!((joined.windows, joined.items, joined.bytes()), (3, 2, 20));
    }

    #[test]
    fn a_batch_costs_its_encoded_size_and_metrics_join_as_protobuf_concatenation() {
        use opentelemetry_proto::tonic::metrics::v1::ResourceMetrics;
        let part = |n: usize| ExportMetricsServiceRequest {
            resource_metrics: (0..n)
                .map(|i| ResourceMetrics {
                    schema_url: format!("https://example.com/{i}"),
                    ..ResourceMetrics::default()
                })
                .collect(),
        };
        let a = Batch::new(part(2), 1);
        let b = Batch::new(part(3), 2);
        // What the queue counts is the buffer it holds, no more.
        assert_eq!(a.bytes(), part(2).encoded_len());
        assert_eq!(a.encoded.capacity(), a.encoded.len());
        let q = SendQueue::new(1 << 20);
        q.push_joined(a.clone(), 1 << 20);
        q.push_joined(b.clone(), 1 << 20);
        assert_eq!(q.len(), (1, a.bytes() + b.bytes()));
        let joined = q.pop(Duration::ZERO).expect("a batch");
        assert_eq!(joined.encoded.capacity(), joined.encoded.len());
        let mut whole = part(2);
        whole.absorb(part(3)).expect("metrics always join");
        assert_eq!(joined.request().expect("decodes"), whole);
        assert_eq!((joined.items, joined.windows), (0, 3));
    }

    #[test]
    fn the_oldest_go_when_a_batch_would_not_fit() {
        let q = SendQueue::new(100);
        assert!(q.push(batch(40, 1)).is_empty());
        assert!(q.push(batch(40, 2)).is_empty());
        assert_eq!(q.len(), (2, 80));
        // 80 + 30 > 100: the oldest (windows 1) makes room.
        let evicted = q.push(batch(30, 3));
        assert_eq!(evicted.iter().map(|b| b.windows).collect::<Vec<_>>(), [1]);
        assert_eq!(q.len(), (2, 70));
        // Exactly at the bound fits.
        assert!(q.push(batch(30, 4)).is_empty());
        assert_eq!(q.len(), (3, 100));
        // A batch larger than the bound is kept alone.
        let evicted = q.push(batch(150, 5));
        assert_eq!(evicted.len(), 3);
        assert_eq!(q.len(), (1, 150));
    }

    #[test]
    fn a_retried_batch_goes_back_first_and_pop_waits() {
        let q = SendQueue::new(1000);
        q.push(batch(10, 1));
        q.push(batch(10, 2));
        let first = q.pop(Duration::ZERO).expect("a batch");
        assert_eq!(first.windows, 1);
        q.push_front(vec![batch(5, 10), batch(5, 11)]);
        let order: Vec<u64> =
            std::iter::from_fn(|| q.pop(Duration::ZERO).map(|b| b.windows)).collect();
        assert_eq!(order, [10, 11, 2]);
        let started = Instant::now();
        assert!(q.pop(Duration::from_millis(50)).is_none());
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(q.is_empty());
    }
}
