//! The sender, one per signal (metrics, logs), the same code over each signal's request type
//! ([`Payload`]): one thread that takes batches from its [`SendQueue`] in order and sends
//! each until it is delivered, retrying with exponential backoff (500 ms doubling to three export
//! intervals, 30 s at most; reset by a success) and never before a collector's `Retry-After`
//! (HTTP) or `RetryInfo` (gRPC) has passed. A batch the intake refuses as too large (HTTP 413,
//! gRPC `ResourceExhausted` on the message size) is halved and both halves sent, the first at
//! once and from the second refusal in a row on after the backoff; later batches go in parts
//! of the size it took ([`SizeLimit`]), which is probed upward again after successes; a batch
//! at [`SizeLimit::floor_bytes`] or of one item that is still refused is dropped, counted under
//! `too_large`. One it refuses for good (a redirect, 401/403, another 4xx, gRPC
//! `InvalidArgument`/`Unauthenticated`) is dropped, counted, as the OpenTelemetry Collector's
//! exporters do. At shutdown it sends what it can until the deadline; the rest is counted
//! dropped. Every attempt is counted in [`Delivery`].
//!
//! How a batch travels (HTTP, gRPC) and what an answer means is `otlp/transport.rs`; this loop
//! knows only the [`Outcome`] of each attempt.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::delivery::{reason, Delivery, Reason};
use super::queue::{Batch, Payload, SendQueue};

/// What became of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// Worth another try later, filed under this reason.
    Retry(Reason),
    /// The intake refused the request's size: halve it.
    TooLarge,
    /// Refused for good, filed under this reason: the batch is dropped.
    Refused(Reason),
}

/// How one batch of a signal's requests `R` travels: the request comes encoded, as the queue
/// holds it (HTTP sends those bytes; gRPC decodes them for tonic's client).
pub trait Transport<R>: Send {
    fn send(&mut self, encoded: &[u8]) -> Outcome;
}

impl<R> Transport<R> for Box<dyn Transport<R>> {
    fn send(&mut self, encoded: &[u8]) -> Outcome {
        (**self).send(encoded)
    }
}

/// The backoff between failed attempts.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// For exports every `interval`: waits up to three intervals between attempts (30 s at
    /// the default 10 s, the Collector's own maximum), at least 1 s; from 500 ms, or the
    /// interval if that is shorter.
    pub fn for_interval(interval: Duration) -> Backoff {
        Backoff {
            initial: interval.min(Duration::from_millis(500)),
            max: (interval * 3).clamp(Duration::from_secs(1), Duration::from_secs(30)),
        }
    }
}

/// What the export and its sender thread share.
#[derive(Debug, Default)]
pub struct Control {
    stop: AtomicBool,
    /// Set at shutdown: send until then, and no longer.
    deadline: Mutex<Option<Instant>>,
}

impl Control {
    /// Whether every batch queued so far is settled.
    pub fn idle<R: Payload>(&self, queue: &SendQueue<R>) -> bool {
        queue.idle()
    }

    pub fn finish_by(&self, deadline: Instant) {
        if let Ok(mut d) = self.deadline.lock() {
            *d = Some(deadline);
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    fn deadline(&self) -> Option<Instant> {
        self.deadline.lock().ok().and_then(|d| *d)
    }
}

pub struct Sender<R: Payload, T: Transport<R>> {
    pub queue: Arc<SendQueue<R>>,
    pub delivery: Arc<Delivery>,
    pub control: Arc<Control>,
    pub transport: T,
    pub backoff: Backoff,
    pub sizes: SizeLimit,
}

/// The smallest request the sender cuts a refused batch down to: the smallest
/// `--otlp-max-request-bytes` there is. An intake that refuses 1 KiB refuses everything;
/// halving on to single points only multiplied the refused requests (2,016 in 7.8 s).
pub const MIN_SPLIT_BYTES: usize = 1024;

/// What the sender learnt of the intake's size limit from its 413s: batches larger than the
/// learnt limit go in parts of at most that size, so that they are not each refused first.
/// A limit learnt from one passing 413 must not shrink every later request for the life of the
/// process (16 requests became 65): it holds for `hold` after the last refusal, then doubles
/// with each success until it reaches the configured maximum, where it is forgotten. Against
/// an intake whose limit is real, that costs one refused request per `hold`.
#[derive(Debug, Clone)]
pub struct SizeLimit {
    /// The configured maximum (`--otlp-max-request-bytes`).
    pub max_request_bytes: usize,
    /// Below this a refused batch is dropped rather than halved ([`MIN_SPLIT_BYTES`]).
    pub floor_bytes: usize,
    /// How long a learnt limit holds before it is probed upward.
    pub hold: Duration,
    learned: Option<usize>,
    refused_at: Option<Instant>,
    /// 413s since the last success: from the second on, the sender backs off.
    refusals_in_a_row: u32,
    /// When the drop of a batch refused at the floor was last warned about, and how many
    /// drops went unwarned since: once a minute, as every failure reason is logged.
    floor_warned_at: Option<Instant>,
    floor_unwarned: u64,
}

/// How often the drop of a batch refused at the floor is warned about (each a signal).
const FLOOR_WARNING_EVERY: Duration = Duration::from_secs(60);

impl SizeLimit {
    /// A limit of `max_request_bytes`, halved down to [`MIN_SPLIT_BYTES`] at most, held six
    /// export intervals (a minute at the default 10 s) before probing upward.
    pub fn new(max_request_bytes: usize, interval: Duration) -> SizeLimit {
        SizeLimit {
            max_request_bytes,
            floor_bytes: MIN_SPLIT_BYTES,
            hold: interval * 6,
            learned: None,
            refused_at: None,
            refusals_in_a_row: 0,
            floor_warned_at: None,
            floor_unwarned: 0,
        }
    }

    /// A batch refused at the floor was dropped at `now`: `Some(drops left unwarned since the
    /// last warning)` when this one is to be warned about, at most once a minute. Against a
    /// collector that answers 413 to everything each signal dropped a batch every backoff (4
    /// warnings a minute of the two signals, where every other reason is logged once a minute).
    fn floor_drop_warning(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .floor_warned_at
            .is_none_or(|at| now.saturating_duration_since(at) >= FLOOR_WARNING_EVERY);
        if due {
            self.floor_warned_at = Some(now);
            Some(std::mem::take(&mut self.floor_unwarned))
        } else {
            self.floor_unwarned += 1;
            None
        }
    }

    /// The size batches are cut to before they are sent, if smaller than the maximum.
    pub fn learned(&self) -> Option<usize> {
        self.learned
    }

    /// The intake refused a request of `bytes` as too large: the limit becomes half of it (no
    /// less than the floor). Returns the refusals in a row, this one included.
    fn refused(&mut self, bytes: usize) -> u32 {
        let half = (bytes / 2).max(self.floor_bytes);
        self.learned = Some(self.learned.map_or(half, |l| l.min(half)));
        self.refused_at = Some(Instant::now());
        self.refusals_in_a_row = self.refusals_in_a_row.saturating_add(1);
        self.refusals_in_a_row
    }

    /// A request went through: once the learnt limit has held long enough, it doubles (and is
    /// forgotten at the maximum).
    fn succeeded(&mut self) {
        self.refusals_in_a_row = 0;
        let Some(limit) = self.learned else { return };
        if self.refused_at.is_some_and(|t| t.elapsed() < self.hold) {
            return;
        }
        let up = limit.saturating_mul(2);
        self.learned = (up < self.max_request_bytes).then_some(up);
    }
}

/// What one batch's attempt leaves the loop to do.
enum Next {
    Go,
    /// Wait the backoff before the next attempt.
    BackOff,
    /// Stop sending (our own shutdown).
    Stop,
}

impl<R: Payload, T: Transport<R>> Sender<R, T> {
    /// Sleeps `d`, or less if the agent stops; returns false when the agent stops or the wait
    /// would run past the shutdown deadline (nothing more can be sent in time).
    fn pause(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        if self
            .control
            .deadline()
            .is_some_and(|deadline| until > deadline)
        {
            return false;
        }
        while Instant::now() < until {
            if self.control.stop.load(Ordering::SeqCst) {
                return false;
            }
            std::thread::sleep((until - Instant::now()).min(Duration::from_millis(20)));
        }
        true
    }

    /// Sends batches until stopped, or until the shutdown deadline.
    pub fn run(mut self) {
        let mut wait = self.backoff.initial;
        while !self.control.stop.load(Ordering::SeqCst)
            && self
                .control
                .deadline()
                .is_none_or(|deadline| Instant::now() < deadline)
        {
            // The collector asked to be left alone: not one request before it said.
            if let Some(hold) = self.delivery.held() {
                if !self.pause(hold) {
                    break;
                }
                continue;
            }
            let Some(batch) = self.queue.pop(Duration::from_millis(50)) else {
                continue;
            };
            let next = self.attempt(batch);
            self.queue.settle();
            match next {
                Next::Go => wait = self.backoff.initial,
                Next::Stop => break,
                Next::BackOff => {
                    if !self.pause(wait) {
                        break;
                    }
                    wait = (wait * 2).min(self.backoff.max);
                }
            }
        }
    }

    /// One attempt at the batch `pop` gave; whatever comes of it is settled here: counted
    /// delivered or dropped, or put back (whole or in parts) at the front of the queue.
    fn attempt(&mut self, batch: Batch<R>) -> Next {
        let signal = R::SIGNAL;
        let limit = self.sizes.learned();
        let batch = match limit.filter(|l| batch.encoded.len() > *l && batch.items > 1) {
            Some(l) => match batch.request() {
                Ok(request) => {
                    let mut windows = batch.windows;
                    let mut parts: Vec<Batch<R>> = to_fit(request, l)
                        .into_iter()
                        .map(|p| Batch::new(p, std::mem::take(&mut windows)))
                        .collect();
                    // The first part now, the others back at the front, in order.
                    let first = parts.remove(0);
                    self.queue.push_front(parts);
                    first
                }
                // Our own encoding always decodes; were it not to, the batch goes whole.
                Err(_) => batch,
            },
            None => batch,
        };
        self.delivery.attempt_started(signal);
        let outcome = self.transport.send(&batch.encoded);
        if outcome != Outcome::Delivered && self.control.stop.load(Ordering::SeqCst) {
            // Cut short by our own shutdown (the runtime going away under the call): an
            // attempt, failed under `shutdown`, not the collector's failure. The batch is
            // counted dropped with the rest.
            self.delivery.attempt_failed(signal, reason::SHUTDOWN);
            self.queue.push_front(vec![batch]);
            return Next::Stop;
        }
        match outcome {
            Outcome::Delivered => {
                self.sizes.succeeded();
                self.delivery
                    .batch_delivered(signal, batch.items, batch.windows);
                Next::Go
            }
            Outcome::Refused(why) => {
                self.delivery.attempt_failed(signal, why);
                self.delivery
                    .batch_dropped(signal, batch.items, batch.windows);
                Next::Go
            }
            Outcome::TooLarge => {
                self.delivery.attempt_failed(signal, reason::TOO_LARGE);
                let in_a_row = self.sizes.refused(batch.encoded.len());
                let halves = if batch.encoded.len() > self.sizes.floor_bytes {
                    batch.request().ok().and_then(|r| r.halve())
                } else {
                    None
                };
                match halves {
                    Some((left, right)) => {
                        let left = Batch::new(left, batch.windows);
                        self.queue.push_front(vec![left, Batch::new(right, 0)]);
                    }
                    // At the floor, or one item larger than the intake takes: not sent.
                    None => {
                        if let Some(unwarned) = self.sizes.floor_drop_warning(Instant::now()) {
                            tracing::warn!(
                                signal = signal.as_str(),
                                items = batch.items,
                                bytes = batch.encoded.len(),
                                since_last_warning = unwarned,
                                "the collector refused a request as too large even at the smallest size the agent sends; its items are dropped, counted under too_large (warned once a minute)"
                            );
                        }
                        self.delivery.dropped_for(
                            signal,
                            batch.items,
                            batch.windows,
                            reason::TOO_LARGE,
                        );
                    }
                }
                // One refusal is a limit to learn, at once; refusals in a row are a collector
                // that refuses everything, which gets the backoff like any failure.
                if in_a_row > 1 {
                    Next::BackOff
                } else {
                    Next::Go
                }
            }
            Outcome::Retry(why) => {
                self.delivery.attempt_failed(signal, why);
                self.queue.push_front(vec![batch]);
                Next::BackOff
            }
        }
    }
}

/// The request cut into parts of at most `max_bytes` each (protobuf, before compression), as
/// few as halving gives; a single point or record larger than that is a part of its own.
pub fn to_fit<R: Payload>(request: R, max_bytes: usize) -> Vec<R> {
    let mut out = Vec::new();
    let mut todo = vec![request];
    while let Some(r) = todo.pop() {
        if r.encoded_len() <= max_bytes {
            out.push(r);
            continue;
        }
        match r.halve() {
            // Right first on the stack, so that parts come out in order.
            Some((left, right)) => {
                todo.push(right);
                todo.push(left);
            }
            None => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::delivery::Signal;
    use super::*;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use prost::Message as _;

    #[test]
    fn drops_at_the_floor_are_warned_about_once_a_minute_counting_the_rest() {
        let mut sizes = SizeLimit::new(1 << 20, Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(sizes.floor_drop_warning(t0), Some(0));
        // An always-413 collector: a drop every 30 s backoff, and more while it ramps.
        for s in [1, 15, 30, 45, 59] {
            assert_eq!(
                sizes.floor_drop_warning(t0 + Duration::from_secs(s)),
                None,
                "{s}"
            );
        }
        assert_eq!(
            sizes.floor_drop_warning(t0 + Duration::from_secs(60)),
            Some(5)
        );
        assert_eq!(sizes.floor_drop_warning(t0 + Duration::from_secs(90)), None);
        assert_eq!(
            sizes.floor_drop_warning(t0 + Duration::from_secs(119)),
            None
        );
        assert_eq!(
            sizes.floor_drop_warning(t0 + Duration::from_secs(120)),
            Some(2)
        );
    }

    /// A transport that answers from a script, recording what it was sent.
    struct Scripted {
        answers: Vec<Outcome>,
        sent: Arc<Mutex<Vec<u64>>>,
    }

    impl Transport<ExportMetricsServiceRequest> for Scripted {
        fn send(&mut self, encoded: &[u8]) -> Outcome {
            let request = ExportMetricsServiceRequest::decode(encoded).expect("our encoding");
            if let Ok(mut sent) = self.sent.lock() {
                sent.push(crate::export::otlp::payload::points(&request));
            }
            if self.answers.is_empty() {
                Outcome::Delivered
            } else {
                self.answers.remove(0)
            }
        }
    }

    fn request(points: usize) -> ExportMetricsServiceRequest {
        use opentelemetry_proto::tonic::metrics::v1::{
            metric::Data, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
        };
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "hw.power".into(),
                        data: Some(Data::Gauge(Gauge {
                            // Points of some size, so that half the points is about half the
                            // bytes.
                            data_points: (0..points)
                                .map(|i| NumberDataPoint {
                                    time_unix_nano: 1_796_025_905_000_000_000 + i as u64,
                                    start_time_unix_nano: 1_796_025_900_000_000_000,
                                    exemplars: vec![],
                                    ..NumberDataPoint::default()
                                })
                                .collect(),
                        })),
                        ..Metric::default()
                    }],
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            }],
        }
    }

    /// Runs a sender over `batches` with the scripted `answers`, until the queue is settled.
    fn run(batches: Vec<(usize, u64)>, answers: Vec<Outcome>) -> (Arc<Delivery>, Vec<u64>) {
        let queue = Arc::new(SendQueue::new(1 << 20));
        let delivery = Arc::new(Delivery::default());
        for (points, windows) in &batches {
            for _ in 0..*windows {
                delivery.window_produced();
            }
            let w = delivery.queued(*points as u64);
            queue.push(Batch::new(request(*points), w));
        }
        let control = Arc::new(Control::default());
        let sent = Arc::new(Mutex::new(Vec::new()));
        let sender = Sender {
            queue: queue.clone(),
            delivery: delivery.clone(),
            control: control.clone(),
            transport: Scripted {
                answers,
                sent: sent.clone(),
            },
            backoff: Backoff {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(4),
            },
            sizes: SizeLimit {
                floor_bytes: 1,
                ..SizeLimit::new(1 << 20, Duration::from_secs(60))
            },
        };
        let thread = std::thread::spawn(move || sender.run());
        let started = Instant::now();
        while !control.idle(&queue) && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        control.stop();
        let _ = thread.join();
        let sent = sent.lock().map(|s| s.clone()).unwrap_or_default();
        (delivery, sent)
    }

    #[test]
    fn a_failing_collector_costs_a_delay_not_the_data() {
        let (d, sent) = run(
            vec![(10, 2), (20, 1)],
            vec![
                Outcome::Retry(reason::CONNECT),
                Outcome::Retry(reason::UNAVAILABLE),
            ],
        );
        // The first batch three times (two failures), then the second.
        assert_eq!(sent, [10, 10, 10, 20]);
        let c = d.counts();
        assert_eq!((c.windows_delivered, c.windows_dropped), (3, 0));
        assert_eq!((c.points_delivered, c.points_dropped), (30, 0));
        assert_eq!((c.attempted(), c.failed()), (4, 2));
    }

    #[test]
    fn too_large_halves_until_it_fits_and_a_refusal_drops_only_that_batch() {
        let (d, sent) = run(
            vec![(8, 1), (4, 1)],
            vec![
                Outcome::TooLarge,
                Outcome::Delivered,
                Outcome::Delivered,
                Outcome::Refused(reason::AUTH),
            ],
        );
        // 8 refused as too large; from then on anything over half its size goes in parts:
        // its two halves as 2 + 2 each (one part refused for good: dropped alone), then the
        // second batch as 2 + 2.
        assert_eq!(sent, [8, 2, 2, 2, 2, 2, 2]);
        let c = d.counts();
        assert_eq!((c.points_delivered, c.points_dropped), (10, 2));
        // A window counts as delivered with the first part of its batch.
        assert_eq!((c.windows_delivered, c.windows_dropped), (2, 0));
        assert_eq!(
            c.exports_failed.get(&(Signal::Metrics, reason::TOO_LARGE)),
            Some(&1)
        );
        assert_eq!(
            c.exports_failed.get(&(Signal::Metrics, reason::AUTH)),
            Some(&1)
        );
    }

    #[test]
    fn a_learnt_limit_stops_at_the_floor_holds_then_doubles_back_to_the_maximum() {
        let mut sizes = SizeLimit {
            floor_bytes: 1024,
            ..SizeLimit::new(4000, Duration::from_millis(10))
        };
        assert_eq!(sizes.hold, Duration::from_millis(60));
        assert_eq!(sizes.learned(), None);
        assert_eq!(sizes.refused(4000), 1);
        assert_eq!(sizes.learned(), Some(2000));
        // Half of 2,000 is under the floor: the floor.
        assert_eq!(sizes.refused(2000), 2);
        assert_eq!(sizes.learned(), Some(1024));
        // A larger refusal does not raise it.
        sizes.refused(3000);
        assert_eq!(sizes.learned(), Some(1024));
        // Within the hold, a success changes nothing but the refusals in a row.
        sizes.succeeded();
        assert_eq!((sizes.learned(), sizes.refusals_in_a_row), (Some(1024), 0));
        std::thread::sleep(Duration::from_millis(70));
        // Past it, each success doubles the limit, which is forgotten at the maximum.
        sizes.succeeded();
        assert_eq!(sizes.learned(), Some(2048));
        sizes.succeeded();
        assert_eq!(sizes.learned(), None);
        // The default floor is the smallest --otlp-max-request-bytes.
        assert_eq!(
            SizeLimit::new(4_000_000, Duration::from_secs(10)).floor_bytes,
            1024
        );
    }

    /// A transport that answers 413 to everything, and the times it was called.
    struct Refusing(Arc<Mutex<Vec<(Instant, u64)>>>);

    impl Transport<ExportMetricsServiceRequest> for Refusing {
        fn send(&mut self, encoded: &[u8]) -> Outcome {
            let points = ExportMetricsServiceRequest::decode(encoded)
                .map(|r| crate::export::otlp::payload::points(&r))
                .unwrap_or(0);
            if let Ok(mut seen) = self.0.lock() {
                seen.push((Instant::now(), points));
            }
            Outcome::TooLarge
        }
    }

    #[test]
    fn an_intake_that_refuses_everything_gets_backoff_not_a_storm_and_the_points_are_dropped() {
        let queue = Arc::new(SendQueue::new(1 << 20));
        let delivery = Arc::new(Delivery::default());
        let one = request(1).encoded_len();
        let w = delivery.queued(256);
        queue.push(Batch::new(request(256), w));
        let control = Arc::new(Control::default());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sender = Sender {
            queue: queue.clone(),
            delivery: delivery.clone(),
            control: control.clone(),
            transport: Refusing(seen.clone()),
            backoff: Backoff {
                initial: Duration::from_millis(10),
                max: Duration::from_millis(40),
            },
            // A floor of about 32 points.
            sizes: SizeLimit {
                floor_bytes: 32 * one,
                ..SizeLimit::new(1 << 20, Duration::from_secs(60))
            },
        };
        let thread = std::thread::spawn(move || sender.run());
        let started = Instant::now();
        while !control.idle(&queue) && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        control.stop();
        let _ = thread.join();
        let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
        let sizes: Vec<u64> = seen.iter().map(|s| s.1).collect();
        // 256 refused: the limit learnt is half its size, a little under 128 points' (each
        // part repeats the resource and the metric), so 64 go next; refused, the limit is the
        // floor, and each piece of 32 is sent once and dropped. Never below the floor: before,
        // halving went on to one point a request, 511 requests for 256 points.
        let mut expected = vec![256, 64];
        expected.extend([32; 8]);
        assert_eq!(sizes, expected);
        let c = delivery.counts();
        assert_eq!((c.points_delivered, c.points_dropped), (0, 256));
        assert_eq!(
            c.exports_failed.get(&(Signal::Metrics, reason::TOO_LARGE)),
            Some(&(seen.len() as u64))
        );
        // From the second refusal in a row on, each request waited the backoff: 10, 20, then
        // 40 ms at most.
        for (i, pair) in seen.windows(2).enumerate().skip(1) {
            let waited = pair[1].0 - pair[0].0;
            let wanted = Duration::from_millis((10u64 << (i - 1).min(2)).min(40));
            assert!(
                waited >= wanted,
                "request {}: {waited:?} < {wanted:?}",
                i + 1
            );
        }
    }

    #[test]
    fn gzip_round_trips() {
        use std::io::Read as _;
        let data = request(50).encode_to_vec();
        let zipped = crate::export::otlp::transport::gzip(&data).expect("gzip");
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&zipped[..])
            .read_to_end(&mut back)
            .expect("gunzip");
        assert_eq!(back, data);
    }
}
