//! The sending queue of the metrics exports: what a collection produced waits here until the
//! sender delivers it, so that a collector that is down, throttling or restarting costs a delay,
//! not the data. Bounded in bytes (protobuf, before compression): when a new batch would not
//! fit, the oldest batches go, and the caller counts them as dropped. The OpenTelemetry
//! Collector's sending queue is the model; this one is in memory only.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;

/// One export's worth of points, and the windows it is the first to carry.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub request: ExportMetricsServiceRequest,
    /// Its size as protobuf, before compression.
    pub bytes: usize,
    pub points: u64,
    /// Windows counted delivered when this batch is.
    pub windows: u64,
}

impl Batch {
    pub fn new(request: ExportMetricsServiceRequest, windows: u64) -> Batch {
        Batch {
            bytes: super::split::encoded_len(&request),
            points: super::split::points(&request),
            request,
            windows,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    batches: VecDeque<Batch>,
    bytes: usize,
    /// Batches taken by the sender and not yet settled (delivered, dropped or put back).
    in_flight: usize,
}

/// A FIFO of batches, at most `max_bytes` in all (a single batch larger than that is kept alone).
#[derive(Debug)]
pub struct SendQueue {
    state: Mutex<State>,
    ready: Condvar,
    max_bytes: usize,
}

impl SendQueue {
    pub fn new(max_bytes: usize) -> SendQueue {
        SendQueue {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            max_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere mid-update: the queue is still a queue.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `batch` at the back; returns the batches that made room for it, oldest first.
    pub fn push(&self, batch: Batch) -> Vec<Batch> {
        let mut state = self.lock();
        let mut evicted = Vec::new();
        while !state.batches.is_empty() && state.bytes + batch.bytes > self.max_bytes {
            if let Some(old) = state.batches.pop_front() {
                state.bytes -= old.bytes;
                evicted.push(old);
            }
        }
        state.bytes += batch.bytes;
        state.batches.push_back(batch);
        drop(state);
        self.ready.notify_all();
        evicted
    }

    /// Puts a batch the sender took back at the front (its send failed and will be retried),
    /// or the parts of a batch that was split, in order.
    pub fn push_front(&self, batches: Vec<Batch>) {
        let mut state = self.lock();
        for b in batches.into_iter().rev() {
            state.bytes += b.bytes;
            state.batches.push_front(b);
        }
    }

    /// Takes the oldest batch, waiting up to `wait` for one; the taker calls [`settle`]
    /// once it is done with it (after putting it or its parts back, if it does).
    ///
    /// [`settle`]: SendQueue::settle
    pub fn pop(&self, wait: Duration) -> Option<Batch> {
        let deadline = Instant::now() + wait;
        let mut state = self.lock();
        loop {
            if let Some(b) = state.batches.pop_front() {
                state.bytes -= b.bytes;
                state.in_flight += 1;
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
    pub fn drain(&self) -> Vec<Batch> {
        let mut state = self.lock();
        state.bytes = 0;
        state.batches.drain(..).collect()
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

    fn batch(bytes: usize, windows: u64) -> Batch {
        Batch {
            request: ExportMetricsServiceRequest::default(),
            bytes,
            points: 1,
            windows,
        }
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
