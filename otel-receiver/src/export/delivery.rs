//! What became of everything the agent produced: windows, exported points and diagnosis-change
//! log records, each either delivered or counted as dropped, with the reason. Nothing is lost
//! silently: these counts are exported like every other metric (`gpuslack.agent.*`), served on
//! `/metrics`, summed in one line at exit, and a warning repeats with back-off while nothing
//! reaches the collector.
//!
//! A window rides with the first batch of the collection that follows it, and a log record with
//! its batch: each is delivered when its batch is, and dropped only when its batch is given up
//! (the sending queue overflowed, the collector refused it for good, or the agent stopped before
//! it could be sent). Both signals are counted the same way, through the same sender.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Distinct partial-success messages logged; past that, rejections are only counted.
const MESSAGES_LOGGED: usize = 32;

/// The log lines about exports, kept few: a failure once a minute per reason with its cause,
/// and a collector's partial-success message once per distinct message.
#[derive(Debug, Default)]
pub struct RejectionLog {
    failures: Mutex<HashMap<Reason, Instant>>,
    messages: Mutex<HashSet<String>>,
}

impl RejectionLog {
    /// Logs a failure with its cause, once a minute per reason.
    pub fn log_failure(&self, endpoint: &str, reason: Reason, cause: &str) {
        let due = match self.failures.lock() {
            Ok(mut logged) => {
                let now = Instant::now();
                let due = logged
                    .get(&reason)
                    .is_none_or(|t| now.duration_since(*t) >= Duration::from_secs(60));
                if due {
                    logged.insert(reason, now);
                }
                due
            }
            Err(_) => true,
        };
        if due {
            let cause = crate::text::message(cause);
            let cause = cause.as_ref();
            let reason = reason.as_str();
            tracing::warn!(endpoint, reason, cause, "OTLP export failed");
        }
    }

    /// Logs what a collector rejected of an export, the first time its message is seen.
    pub fn log(&self, endpoint: &str, signal: Signal, rejected: u64, message: &str) {
        // The collector's words, escaped and capped before they are kept or shown: a body
        // may be up to 4 MiB (opentelemetry-http's cap), and MESSAGES_LOGGED of them kept.
        let message = crate::text::message(message);
        let message = message.as_ref();
        let first = match self.messages.lock() {
            Ok(mut seen) => seen.len() < MESSAGES_LOGGED && seen.insert(message.to_string()),
            Err(_) => false,
        };
        if first {
            tracing::warn!(
                endpoint,
                signal = signal.as_str(),
                rejected,
                message,
                "the collector rejected part of an export; the rejected items are counted as dropped"
            );
        }
    }
}

/// The two OTLP signals the agent sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Signal {
    Metrics,
    Logs,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Metrics => "metrics",
            Signal::Logs => "logs",
        }
    }
}

/// Why an export failed, or why its items were dropped, as far as an operator can act on it:
/// the `reason` of `gpuslack.agent.exports`, of the exit summary and of the export warnings.
/// An enum, so that a match names every reason and the docs are checked against [`Reason::ALL`]
/// (docs/EXPORT.md's table and its paragraph on failed exports, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The collector could not be reached (refused, no route, name not resolved).
    Connect,
    /// The TLS handshake failed (unknown issuer, wrong name, expired certificate).
    Tls,
    /// No answer within the export timeout.
    Timeout,
    /// The collector refused the credentials (HTTP 401/403, gRPC Unauthenticated).
    Auth,
    /// The collector asked to slow down (HTTP 429 or 503 with Retry-After, gRPC
    /// ResourceExhausted), or the agent held back because it was asked to.
    Throttled,
    /// The collector is unavailable (HTTP 502/503/504, gRPC Unavailable).
    Unavailable,
    /// The collector rejected the data (another 4xx, gRPC InvalidArgument).
    Rejected,
    /// The collector answered with a redirect (HTTP 3xx). Redirects are not followed: the
    /// POST would become a body-less GET, and the API key would travel to another host.
    Redirected,
    /// The collector answered, but not in HTTP the client can read: a malformed status line
    /// or header, a header block past the client's limit, a body over 4 MiB.
    Protocol,
    /// The connection broke during the request, or another transport failure.
    Network,
    /// The intake refused the request's size (HTTP 413, gRPC `ResourceExhausted` on the
    /// message size): the batch is halved and sent again.
    TooLarge,
    /// The agent stopped while the request was in flight (a collector that hung past
    /// `--shutdown-timeout-s`): the attempt is counted, its items dropped.
    Shutdown,
    /// Anything else.
    Other,
}

impl Reason {
    /// Every reason, in the order docs/EXPORT.md lists them.
    pub const ALL: [Reason; 13] = [
        Reason::Connect,
        Reason::Tls,
        Reason::Timeout,
        Reason::Auth,
        Reason::Throttled,
        Reason::Unavailable,
        Reason::Rejected,
        Reason::Redirected,
        Reason::Protocol,
        Reason::Network,
        Reason::TooLarge,
        Reason::Shutdown,
        Reason::Other,
    ];

    /// The reason as exported, logged and summed up at exit.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Connect => "connect",
            Reason::Tls => "tls",
            Reason::Timeout => "timeout",
            Reason::Auth => "auth",
            Reason::Throttled => "throttled",
            Reason::Unavailable => "unavailable",
            Reason::Rejected => "rejected",
            Reason::Redirected => "redirected",
            Reason::Protocol => "protocol",
            Reason::Network => "network",
            Reason::TooLarge => "too_large",
            Reason::Shutdown => "shutdown",
            Reason::Other => "other",
        }
    }
}

/// Ordered by name, as the counts keyed by reason were (the exit summary and the exported
/// series list them in this order).
impl Ord for Reason {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Reason {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reasons under the names they had as strings, for matching (`reason::AUTH`).
pub mod reason {
    use super::Reason;

    pub const CONNECT: Reason = Reason::Connect;
    pub const TLS: Reason = Reason::Tls;
    pub const TIMEOUT: Reason = Reason::Timeout;
    pub const AUTH: Reason = Reason::Auth;
    pub const THROTTLED: Reason = Reason::Throttled;
    pub const UNAVAILABLE: Reason = Reason::Unavailable;
    pub const REJECTED: Reason = Reason::Rejected;
    pub const REDIRECTED: Reason = Reason::Redirected;
    pub const TOO_LARGE: Reason = Reason::TooLarge;
    pub const PROTOCOL: Reason = Reason::Protocol;
    pub const NETWORK: Reason = Reason::Network;
    pub const SHUTDOWN: Reason = Reason::Shutdown;
    pub const OTHER: Reason = Reason::Other;
}

/// What an error's text says of its cause, whatever the transport wrote it: TLS (a certificate
/// refused, or a TLS client that met a plaintext server: rustls reads its answer as a "corrupt
/// message of type InvalidContentType"), or a timeout (tonic's "Timeout expired", which it files
/// under the gRPC code `Cancelled`). `None` when the text says neither.
pub fn reason_in_text(text: &str) -> Option<Reason> {
    let lower = text.to_ascii_lowercase();
    let tls = [
        "certificate",
        "tls",
        "handshake",
        "x509",
        "unknownissuer",
        "invalidcontenttype",
        "corrupt message",
    ];
    if tls.iter().any(|w| lower.contains(w)) {
        return Some(reason::TLS);
    }
    let timeout = [
        "timeout expired",
        "timed out",
        "deadline exceeded",
        "deadlineexceeded",
    ];
    if timeout.iter().any(|w| lower.contains(w)) {
        return Some(reason::TIMEOUT);
    }
    None
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    pub windows_produced: u64,
    pub windows_delivered: u64,
    pub windows_dropped: u64,
    /// Produced since the last export: not yet delivered or dropped.
    pub windows_pending: u64,
    /// Carried by batches waiting in the sending queue (or being sent).
    pub windows_queued: u64,
    pub points_queued: u64,
    pub exports_attempted: BTreeMap<Signal, u64>,
    pub exports_succeeded: BTreeMap<Signal, u64>,
    /// Failed exports by signal and reason.
    pub exports_failed: BTreeMap<(Signal, Reason), u64>,
    pub points_delivered: u64,
    /// Points not delivered: those of failed exports, and those the collector rejected.
    pub points_dropped: u64,
    /// Of the points dropped, those a collector answered as rejected (OTLP partial success).
    pub points_rejected: u64,
    pub log_records_emitted: u64,
    pub log_records_delivered: u64,
    pub log_records_dropped: u64,
    /// Waiting in the logs' sending queue (or being sent).
    pub log_records_queued: u64,
    /// Of the log records dropped, those a collector answered as rejected.
    pub log_records_rejected: u64,
    /// Points the SDK folded into an overflow series past an instrument's cardinality limit.
    pub points_overflowed: u64,
    /// Of the points (metrics) and records (logs) dropped, those given up for a reason of
    /// their own rather than with a failed or overflowing queue: `too_large` (refused at the
    /// smallest size sent, or a record larger than the request limit).
    pub dropped_by_reason: BTreeMap<(Signal, Reason), u64>,
    pub scrapes_served: u64,
    /// What each signal's sending queue holds now, against its bound.
    pub queues: BTreeMap<Signal, QueueHeld>,
}

/// What a sending queue holds at one moment: batches and bytes waiting, and its bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueHeld {
    pub batches: usize,
    pub bytes: usize,
    pub max_bytes: usize,
}

/// A sending queue's level, kept by the queue as it changes and read without its lock: for the
/// agent's own gauge (`gpuslack.agent.queue.*`), which a scrape reads while the sender holds
/// the queue.
#[derive(Debug, Default)]
pub struct QueueLevel {
    batches: AtomicUsize,
    bytes: AtomicUsize,
    max_bytes: AtomicUsize,
}

impl QueueLevel {
    /// A level for a queue bounded at `max_bytes`, empty.
    pub fn new(max_bytes: usize) -> QueueLevel {
        let level = QueueLevel::default();
        level.max_bytes.store(max_bytes, Ordering::Relaxed);
        level
    }

    /// The queue now holds `batches` in `bytes`.
    pub fn set(&self, batches: usize, bytes: usize) {
        self.batches.store(batches, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    /// What it holds now.
    pub fn held(&self) -> QueueHeld {
        QueueHeld {
            batches: self.batches.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            max_bytes: self.max_bytes.load(Ordering::Relaxed),
        }
    }
}

impl Counts {
    pub fn succeeded(&self) -> u64 {
        self.exports_succeeded.values().sum()
    }

    pub fn attempted(&self) -> u64 {
        self.exports_attempted.values().sum()
    }

    pub fn failed(&self) -> u64 {
        self.exports_failed.values().sum()
    }

    /// One line for the end of a run.
    pub fn summary(&self) -> String {
        let mut reasons: BTreeMap<Reason, u64> = BTreeMap::new();
        for ((_, r), n) in &self.exports_failed {
            *reasons.entry(*r).or_default() += n;
        }
        let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{r}×{n}")).collect();
        let failed = if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join(", "))
        };
        let rejected = |n: u64| {
            if n == 0 {
                String::new()
            } else {
                format!(" ({n} rejected by the collector)")
            }
        };
        let why = |signal: Signal| {
            let parts: Vec<String> = self
                .dropped_by_reason
                .iter()
                .filter(|((s, _), _)| *s == signal)
                .map(|((_, r), n)| format!("{r}×{n}"))
                .collect();
            if parts.is_empty() {
                String::new()
            } else {
                format!(" ({})", parts.join(", "))
            }
        };
        format!(
            "{} windows produced, {} delivered, {} dropped, {} undelivered; OTLP exports: {} attempted, {} succeeded, {} failed{failed}; points: {} delivered, {} dropped{}{}; diagnosis logs: {} emitted, {} delivered, {} dropped{}{}",
            self.windows_produced,
            self.windows_delivered,
            self.windows_dropped,
            self.windows_pending,
            self.attempted(),
            self.succeeded(),
            self.failed(),
            self.points_delivered,
            self.points_dropped,
            rejected(self.points_rejected),
            why(Signal::Metrics),
            self.log_records_emitted,
            self.log_records_delivered,
            self.log_records_dropped,
            rejected(self.log_records_rejected),
            why(Signal::Logs),
        ) + &if self.points_overflowed > 0 {
            format!(
                "; {} points folded into the SDK's overflow series",
                self.points_overflowed
            )
        } else {
            String::new()
        }
    }
}

#[derive(Debug, Default)]
struct Noted {
    failure: Option<Reason>,
    rejected: u64,
    /// The transport answered for the collector without sending (it had asked to be left
    /// alone): no attempt the collector saw.
    not_sent: bool,
}

#[derive(Debug, Default)]
struct Inner {
    counts: Counts,
    /// The collector asked not to be sent anything before this.
    hold_until: Option<Instant>,
    /// Per signal, what the transport saw of the attempt in progress, for the sender to file
    /// the export under: the failure's reason, and the items the collector rejected. Per signal,
    /// because the metrics' and the logs' senders run at the same time.
    noted: BTreeMap<Signal, Noted>,
    last_success: Option<Instant>,
    /// The first failure since the last success (or since the start).
    failing_since: Option<Instant>,
    /// Metrics exports failed since the last one that succeeded: one per export interval, so
    /// `/healthz` can count intervals rather than guess from a clock.
    metrics_failed_in_a_row: u64,
    /// The reason of the last failed metrics export, for `/healthz` to say why.
    last_metrics_failure: Option<Reason>,
    /// Attempts under way, per signal: those still in flight at exit are counted then.
    in_flight: BTreeMap<Signal, u64>,
    /// Closed at exit: an attempt that ends after that is not counted twice.
    closed: bool,
    /// Each signal's sending queue's level, read into [`Counts::queues`].
    queues: BTreeMap<Signal, Arc<QueueLevel>>,
    /// What broke HTTP in the last answer that did (`reason::PROTOCOL`), for `doctor` to say.
    protocol_fault: Option<&'static str>,
}

/// Shared between the pipeline, the senders and the HTTP client.
#[derive(Debug, Default)]
pub struct Delivery {
    inner: Mutex<Inner>,
}

impl Delivery {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        match self.inner.lock() {
            Ok(mut inner) => f(&mut inner),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    pub fn counts(&self) -> Counts {
        self.with(|i| {
            let mut counts = i.counts.clone();
            counts.queues = i.queues.iter().map(|(s, l)| (*s, l.held())).collect();
            counts
        })
    }

    /// `signal`'s sending queue keeps `level`: its gauge reads it.
    pub fn watch_queue(&self, signal: Signal, level: Arc<QueueLevel>) {
        self.with(|i| {
            i.queues.insert(signal, level);
        });
    }

    pub fn window_produced(&self) {
        self.with(|i| {
            i.counts.windows_produced += 1;
            i.counts.windows_pending += 1;
        });
    }

    /// A diagnosis-change record was announced and put in the logs' sending queue.
    pub fn log_queued(&self) {
        self.with(|i| {
            i.counts.log_records_emitted += 1;
            i.counts.log_records_queued += 1;
        });
    }

    pub fn scrape_served(&self) {
        self.with(|i| i.counts.scrapes_served += 1);
    }

    /// The transport saw this failure (the sender files the attempt under it).
    pub fn note_failure(&self, signal: Signal, reason: Reason) {
        self.with(|i| i.noted.entry(signal).or_default().failure = Some(reason));
    }

    /// The collector's answer broke HTTP this way (`causes::protocol_fault`).
    pub fn note_protocol_fault(&self, fault: &'static str) {
        self.with(|i| i.protocol_fault = Some(fault));
    }

    /// What broke HTTP in the last answer that did, if one did.
    pub fn last_protocol_fault(&self) -> Option<&'static str> {
        self.with(|i| i.protocol_fault)
    }

    /// The transport answered for the collector, which had asked to be left alone (a
    /// `Retry-After` the other signal's sender met while this one's request was on its way):
    /// nothing was sent, so the attempt is not counted. A 503 run with `Retry-After` counted
    /// 29 attempts where the collector saw 25.
    pub fn note_not_sent(&self, signal: Signal) {
        self.with(|i| i.noted.entry(signal).or_default().not_sent = true);
    }

    /// The collector accepted the export but rejected `items` of it (OTLP partial success):
    /// those are counted as dropped when the sender reports the batch delivered.
    pub fn note_rejected(&self, signal: Signal, items: u64) {
        self.with(|i| {
            let noted = i.noted.entry(signal).or_default();
            noted.rejected = noted.rejected.saturating_add(items);
        });
    }

    /// The collector asked to be left alone for `d` (Retry-After).
    pub fn hold_for(&self, d: Duration) {
        let until = Instant::now() + d.min(Duration::from_secs(600));
        self.with(|i| i.hold_until = Some(i.hold_until.map_or(until, |h| h.max(until))));
    }

    /// How long the collector still asked to be left alone, if it did.
    pub fn held(&self) -> Option<Duration> {
        self.with(|i| {
            i.hold_until
                .and_then(|h| h.checked_duration_since(Instant::now()))
                .filter(|d| !d.is_zero())
        })
    }

    /// The SDK folded `points` into an overflow series (an instrument past its limit).
    pub fn cardinality_exceeded(&self, points: u64) {
        self.with(|i| i.counts.points_overflowed += points);
    }

    /// A collection became a batch of `points` in the sending queue: it carries the windows
    /// produced since the last one, which this returns.
    pub fn queued(&self, points: u64) -> u64 {
        self.with(|i| {
            let c = &mut i.counts;
            let windows = std::mem::take(&mut c.windows_pending);
            c.windows_queued += windows;
            c.points_queued += points;
            windows
        })
    }

    /// The sender is about to send a batch of `signal`: an attempt under way, counted as
    /// attempted when it ends, or at exit if it has not ended by then.
    pub fn attempt_started(&self, signal: Signal) {
        self.with(|i| *i.in_flight.entry(signal).or_default() += 1);
    }

    /// An attempt [`started`](Delivery::attempt_started) ended; false once closed (it was
    /// counted at exit).
    fn attempt_ended(i: &mut Inner, signal: Signal) -> bool {
        if let Some(n) = i.in_flight.get_mut(&signal) {
            *n = n.saturating_sub(1);
        }
        !i.closed
    }

    /// A queued batch of `items` points (metrics, with the `windows` it carries) or records
    /// (logs) reached the collector (what it rejected of it, the transport noted).
    pub fn batch_delivered(&self, signal: Signal, items: u64, windows: u64) {
        self.with(|i| {
            if !Self::attempt_ended(i, signal) {
                return;
            }
            let noted = i.noted.remove(&signal).unwrap_or_default();
            let c = &mut i.counts;
            *c.exports_attempted.entry(signal).or_default() += 1;
            *c.exports_succeeded.entry(signal).or_default() += 1;
            let rejected = noted.rejected.min(items);
            match signal {
                Signal::Metrics => {
                    c.points_delivered += items - rejected;
                    c.points_dropped += rejected;
                    c.points_rejected += rejected;
                    c.points_queued = c.points_queued.saturating_sub(items);
                    c.windows_queued = c.windows_queued.saturating_sub(windows);
                    c.windows_delivered += windows;
                    i.metrics_failed_in_a_row = 0;
                }
                Signal::Logs => {
                    c.log_records_delivered += items - rejected;
                    c.log_records_dropped += rejected;
                    c.log_records_rejected += rejected;
                    c.log_records_queued = c.log_records_queued.saturating_sub(items);
                }
            }
            i.last_success = Some(Instant::now());
            i.failing_since = None;
        });
    }

    /// One attempt to send a queued batch of `signal` failed; the batch stays queued (or is
    /// dropped next). Only the metrics' attempts count towards `/healthz`'s failures in a row:
    /// they are tried at least once an interval, the logs only when a verdict changes.
    pub fn attempt_failed(&self, signal: Signal, fallback: Reason) {
        self.with(|i| {
            if !Self::attempt_ended(i, signal) {
                return;
            }
            let noted = i.noted.remove(&signal).unwrap_or_default();
            if noted.not_sent {
                return;
            }
            let reason = noted.failure.unwrap_or(fallback);
            let c = &mut i.counts;
            *c.exports_attempted.entry(signal).or_default() += 1;
            *c.exports_failed.entry((signal, reason)).or_default() += 1;
            i.failing_since.get_or_insert_with(Instant::now);
            // As for an export (above): a throttled attempt neither counts nor resets.
            if signal == Signal::Metrics && reason != reason::THROTTLED {
                i.metrics_failed_in_a_row += 1;
                i.last_metrics_failure = Some(reason);
            }
        });
    }

    /// A queued batch of `signal` is given up: the queue overflowed, the collector refused it
    /// for good, or the agent stopped before it could be sent.
    pub fn batch_dropped(&self, signal: Signal, items: u64, windows: u64) {
        self.with(|i| {
            let c = &mut i.counts;
            match signal {
                Signal::Metrics => {
                    c.points_queued = c.points_queued.saturating_sub(items);
                    c.windows_queued = c.windows_queued.saturating_sub(windows);
                    c.points_dropped += items;
                    c.windows_dropped += windows;
                }
                Signal::Logs => {
                    c.log_records_queued = c.log_records_queued.saturating_sub(items);
                    c.log_records_dropped += items;
                }
            }
        });
    }

    /// `items` of `signal` (with the `windows` they carry) are given up for `reason`: counted
    /// dropped as [`batch_dropped`](Delivery::batch_dropped) does, and under that reason.
    pub fn dropped_for(&self, signal: Signal, items: u64, windows: u64, reason: Reason) {
        self.batch_dropped(signal, items, windows);
        self.with(|i| {
            *i.counts
                .dropped_by_reason
                .entry((signal, reason))
                .or_default() += items;
        });
    }

    /// At exit, after the final flush: whatever the senders never reported on is dropped.
    /// Records emitted but never delivered (still queued when the flush ran out of time) are
    /// counted here too, so that emitted = delivered + dropped.
    pub fn close(&self) {
        self.with(|i| {
            i.closed = true;
            // Requests still in flight (a collector hanging past the shutdown timeout) were
            // attempts all the same: counted, and failed under `shutdown`.
            for (signal, n) in std::mem::take(&mut i.in_flight) {
                if n > 0 {
                    *i.counts.exports_attempted.entry(signal).or_default() += n;
                    *i.counts
                        .exports_failed
                        .entry((signal, reason::SHUTDOWN))
                        .or_default() += n;
                }
            }
            let c = &mut i.counts;
            c.windows_dropped += std::mem::take(&mut c.windows_pending);
            c.windows_dropped += std::mem::take(&mut c.windows_queued);
            c.points_dropped += std::mem::take(&mut c.points_queued);
            // Those still queued are among the emitted that were never delivered or dropped.
            c.log_records_queued = 0;
            let accounted = c.log_records_delivered + c.log_records_dropped;
            c.log_records_dropped += c.log_records_emitted.saturating_sub(accounted);
        });
    }

    /// Since when every export has failed: `None` when the last one succeeded or none failed.
    pub fn failing_since(&self) -> Option<Instant> {
        self.with(|i| i.failing_since)
    }

    /// Whether anything was ever delivered.
    pub fn ever_delivered(&self) -> bool {
        self.with(|i| i.last_success.is_some())
    }

    /// Metrics exports (attempts of the sending queue's) that failed since the last success (0
    /// once one succeeds), and the reason of the latest of them. The sender tries at least once
    /// an interval and backs off from there, so N of them span at least N intervals; log exports
    /// do not count (they run only when a verdict changes).
    pub fn metrics_failing(&self) -> (u64, Option<Reason>) {
        self.with(|i| {
            let reason = if i.metrics_failed_in_a_row > 0 {
                i.last_metrics_failure
            } else {
                None
            };
            (i.metrics_failed_in_a_row, reason)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/EXPORT.md names the reasons twice: in the table row of `gpuslack.agent.exports` and
    /// in the paragraph on failed exports. Both must list exactly [`Reason::ALL`], in order.
    #[test]
    fn the_docs_list_every_drop_reason_and_no_other() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/EXPORT.md");
        let docs = std::fs::read_to_string(path).expect("docs/EXPORT.md");
        let wanted: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        let row = docs
            .lines()
            .find(|l| l.starts_with("| `gpuslack.agent.exports` |"))
            .expect("the table row of gpuslack.agent.exports");
        let listed = row
            .split("`reason` of a failure: ")
            .nth(1)
            .and_then(|rest| rest.split(" |").next())
            .expect("the row's reasons");
        assert_eq!(listed.split(", ").collect::<Vec<_>>(), wanted, "{row}");
        let start = docs
            .find("A failed export is filed under its reason: ")
            .expect("the paragraph on failed exports");
        let paragraph = &docs[start..];
        let paragraph = &paragraph[..paragraph.find("\n\n").unwrap_or(paragraph.len())];
        let mut at = 0;
        for reason in &wanted {
            let quoted = format!("`{reason}`");
            let found = paragraph[at..].find(&quoted).map(|i| at + i);
            assert!(
                found.is_some(),
                "{quoted} is not in the paragraph, after the reason before it"
            );
            at = found.unwrap_or(at) + quoted.len();
        }
        // And the enum's names are the strings that were exported before it was one.
        assert_eq!(reason::TOO_LARGE.to_string(), "too_large");
        let mut sorted = Reason::ALL;
        sorted.sort();
        let names: Vec<&str> = sorted.iter().map(|r| r.as_str()).collect();
        let mut by_name = wanted.clone();
        by_name.sort_unstable();
        assert_eq!(names, by_name, "reasons order by name, as the strings did");
    }

    #[test]
    fn a_collectors_message_is_kept_escaped_and_capped() {
        let log = RejectionLog::default();
        let long = format!("\u{1b}[2J{}", "x".repeat(100_000));
        log.log("http://c:4318", Signal::Metrics, 1, &long);
        let seen = log.messages.lock().expect("lock");
        let kept = seen.iter().next().expect("kept");
        assert!(
            kept.starts_with("\\x1b[2J") && kept.ends_with("chars]"),
            "{}",
            &kept[..40]
        );
        assert!(
            kept.len() < crate::text::MESSAGE_MAX_CHARS + 32,
            "{}",
            kept.len()
        );
    }

    #[test]
    fn an_attempt_in_flight_at_exit_is_counted_once_and_drops_say_why() {
        let d = Delivery::default();
        d.attempt_started(Signal::Metrics);
        d.attempt_started(Signal::Logs);
        d.attempt_started(Signal::Logs);
        d.attempt_failed(Signal::Logs, reason::CONNECT);
        d.dropped_for(Signal::Logs, 1, 0, reason::TOO_LARGE);
        d.close();
        // The hung one ends after the exit's count: not counted again.
        d.attempt_failed(Signal::Metrics, reason::TIMEOUT);
        let c = d.counts();
        assert_eq!(c.exports_attempted.get(&Signal::Metrics), Some(&1));
        assert_eq!(c.exports_attempted.get(&Signal::Logs), Some(&2));
        assert_eq!(
            c.exports_failed.get(&(Signal::Metrics, reason::SHUTDOWN)),
            Some(&1)
        );
        assert_eq!(
            c.exports_failed.get(&(Signal::Logs, reason::SHUTDOWN)),
            Some(&1)
        );
        assert_eq!(
            c.exports_failed.get(&(Signal::Metrics, reason::TIMEOUT)),
            None
        );
        assert!(
            c.summary()
                .contains("3 attempted, 0 succeeded, 3 failed (connect×1, shutdown×2)"),
            "{}",
            c.summary()
        );
        assert!(
            c.summary().ends_with("1 dropped (too_large×1)"),
            "{}",
            c.summary()
        );
    }

    #[test]
    fn every_window_and_record_ends_up_delivered_or_dropped() {
        let d = Delivery::default();
        for _ in 0..5 {
            d.window_produced();
        }
        let w = d.queued(40);
        d.batch_delivered(Signal::Metrics, 40, w);
        for _ in 0..3 {
            d.window_produced();
        }
        let w = d.queued(40);
        d.note_failure(Signal::Metrics, reason::TLS);
        // A logs failure noted meanwhile is the logs sender's, not this one's.
        d.note_failure(Signal::Logs, reason::AUTH);
        d.attempt_failed(Signal::Metrics, reason::OTHER);
        d.batch_dropped(Signal::Metrics, 40, w);
        d.window_produced();
        for _ in 0..4 {
            d.log_queued();
        }
        d.batch_delivered(Signal::Logs, 3, 0);
        d.close();
        let c = d.counts();
        assert_eq!(
            (
                c.windows_produced,
                c.windows_delivered,
                c.windows_dropped,
                c.windows_pending
            ),
            (9, 5, 4, 0)
        );
        assert_eq!((c.points_delivered, c.points_dropped), (40, 40));
        assert_eq!(
            c.exports_failed.get(&(Signal::Metrics, reason::TLS)),
            Some(&1)
        );
        assert_eq!(
            (
                c.log_records_emitted,
                c.log_records_delivered,
                c.log_records_dropped
            ),
            (4, 3, 1)
        );
        assert!(c
            .summary()
            .contains("9 windows produced, 5 delivered, 4 dropped"));
        assert!(d.ever_delivered());
    }

    #[test]
    fn queued_batches_end_delivered_or_dropped_with_their_windows() {
        let d = Delivery::default();
        for _ in 0..3 {
            d.window_produced();
        }
        assert_eq!(d.queued(100), 3);
        d.window_produced();
        assert_eq!(d.queued(50), 1);
        d.window_produced();
        // The first batch fails twice, then arrives with 4 points rejected.
        d.note_failure(Signal::Metrics, reason::CONNECT);
        d.attempt_failed(Signal::Metrics, reason::OTHER);
        d.attempt_failed(Signal::Metrics, reason::UNAVAILABLE);
        d.note_rejected(Signal::Metrics, 4);
        d.batch_delivered(Signal::Metrics, 100, 3);
        // The second is dropped (the queue overflowed).
        d.batch_dropped(Signal::Metrics, 50, 1);
        let c = d.counts();
        assert_eq!(
            (
                c.windows_delivered,
                c.windows_dropped,
                c.windows_queued,
                c.windows_pending
            ),
            (3, 1, 0, 1)
        );
        assert_eq!(
            (
                c.points_delivered,
                c.points_dropped,
                c.points_rejected,
                c.points_queued
            ),
            (96, 54, 4, 0)
        );
        assert_eq!((c.attempted(), c.succeeded(), c.failed()), (3, 1, 2));
        assert_eq!(
            c.exports_failed.get(&(Signal::Metrics, reason::CONNECT)),
            Some(&1)
        );
        assert!(d.failing_since().is_none(), "the last attempt succeeded");
        // At exit what is still queued or pending is dropped.
        d.queued(10);
        d.close();
        let c = d.counts();
        assert_eq!(
            (c.windows_produced, c.windows_delivered + c.windows_dropped),
            (5, 5)
        );
        assert_eq!(c.points_queued, 0);
    }

    #[test]
    fn tls_and_timeouts_are_read_from_either_transport_s_text() {
        for (text, want) in [
            // tonic, https to a plaintext server, and a gRPC deadline
            ("TonicMetricsClient export failed with gRPC code: Unavailable: transport error: received corrupt message of type InvalidContentType", Some(reason::TLS)),
            ("TonicMetricsClient export failed with gRPC code: Cancelled: transport error: Timeout expired", Some(reason::TIMEOUT)),
            // reqwest
            ("client error (Connect): received corrupt message of type InvalidContentType", Some(reason::TLS)),
            ("invalid peer certificate: UnknownIssuer", Some(reason::TLS)),
            ("operation timed out", Some(reason::TIMEOUT)),
            ("tcp connect error: Connection refused (os error 111)", None),
        ] {
            assert_eq!(reason_in_text(text), want, "{text}");
        }
    }

    #[test]
    fn rejected_items_of_a_successful_export_are_dropped_not_delivered() {
        let d = Delivery::default();
        d.window_produced();
        let w = d.queued(100);
        d.note_rejected(Signal::Metrics, 7);
        d.note_rejected(Signal::Logs, 2);
        d.batch_delivered(Signal::Metrics, 100, w);
        for _ in 0..5 {
            d.log_queued();
        }
        d.batch_delivered(Signal::Logs, 5, 0);
        // A rejection noted for an attempt that then failed, its batch given up: all of it
        // dropped, once.
        d.queued(10);
        d.note_rejected(Signal::Metrics, 3);
        d.attempt_failed(Signal::Metrics, reason::OTHER);
        d.batch_dropped(Signal::Metrics, 10, 0);
        // More rejected than sent (a confused collector): no more than was sent.
        d.queued(20);
        d.note_rejected(Signal::Metrics, 50);
        d.batch_delivered(Signal::Metrics, 20, 0);
        let c = d.counts();
        assert_eq!(
            (c.points_delivered, c.points_dropped, c.points_rejected),
            (93, 37, 27)
        );
        assert_eq!(
            (
                c.log_records_delivered,
                c.log_records_dropped,
                c.log_records_rejected
            ),
            (3, 2, 2)
        );
        assert_eq!(
            c.windows_delivered, 1,
            "a partial success still delivers the window"
        );
        assert!(
            c.summary()
                .contains("points: 93 delivered, 37 dropped (27 rejected by the collector)"),
            "{}",
            c.summary()
        );
    }

    #[test]
    fn metrics_failures_in_a_row_count_until_a_success_and_logs_do_not_count() {
        let d = Delivery::default();
        assert_eq!(d.metrics_failing(), (0, None));
        d.note_failure(Signal::Metrics, reason::CONNECT);
        d.attempt_failed(Signal::Metrics, reason::OTHER);
        d.attempt_failed(Signal::Metrics, reason::UNAVAILABLE);
        d.attempt_failed(Signal::Logs, reason::AUTH);
        d.batch_delivered(Signal::Logs, 1, 0);
        assert_eq!(d.metrics_failing(), (2, Some(reason::UNAVAILABLE)));
        d.batch_delivered(Signal::Metrics, 10, 0);
        assert_eq!(d.metrics_failing(), (0, None));
        d.attempt_failed(Signal::Metrics, reason::TIMEOUT);
        assert_eq!(d.metrics_failing(), (1, Some(reason::TIMEOUT)));
        // Throttled: the collector is up and asked for a pause; neither counted nor a reset.
        d.note_failure(Signal::Metrics, reason::THROTTLED);
        d.attempt_failed(Signal::Metrics, reason::OTHER);
        assert_eq!(d.metrics_failing(), (1, Some(reason::TIMEOUT)));
        d.attempt_failed(Signal::Metrics, reason::CONNECT);
        assert_eq!(d.metrics_failing(), (2, Some(reason::CONNECT)));
    }

    #[test]
    fn a_hold_is_kept_until_it_passes_and_failing_since_clears_on_success() {
        let d = Delivery::default();
        assert!(d.held().is_none());
        d.hold_for(Duration::from_secs(30));
        let held = d.held().expect("held");
        assert!(held > Duration::from_secs(29) && held <= Duration::from_secs(30));
        d.attempt_failed(Signal::Metrics, reason::THROTTLED);
        assert!(d.failing_since().is_some());
        assert!(!d.ever_delivered());
        d.batch_delivered(Signal::Metrics, 1, 0);
        assert!(d.failing_since().is_none());
    }

    #[test]
    fn queued_records_end_delivered_rejected_or_dropped_and_do_not_touch_health() {
        let d = Delivery::default();
        for _ in 0..10 {
            d.log_queued();
        }
        assert_eq!(d.counts().log_records_queued, 10);
        // Two failed attempts at a batch of 6, then it arrives with 1 rejected.
        d.attempt_failed(Signal::Logs, reason::CONNECT);
        d.note_failure(Signal::Logs, reason::TLS);
        d.attempt_failed(Signal::Logs, reason::OTHER);
        assert_eq!(
            d.metrics_failing(),
            (0, None),
            "logs do not count for /healthz"
        );
        d.note_rejected(Signal::Logs, 1);
        d.batch_delivered(Signal::Logs, 6, 0);
        // One refused for good; 3 still queued at exit.
        d.batch_dropped(Signal::Logs, 1, 0);
        let c = d.counts();
        assert_eq!(
            (
                c.log_records_delivered,
                c.log_records_dropped,
                c.log_records_rejected,
                c.log_records_queued
            ),
            (5, 2, 1, 3)
        );
        assert_eq!(c.exports_failed.get(&(Signal::Logs, reason::TLS)), Some(&1));
        assert_eq!(c.exports_succeeded.get(&Signal::Logs), Some(&1));
        assert_eq!((c.points_delivered, c.windows_delivered), (0, 0));
        d.close();
        let c = d.counts();
        assert_eq!(
            (
                c.log_records_emitted,
                c.log_records_delivered,
                c.log_records_dropped,
                c.log_records_queued
            ),
            (10, 5, 5, 0)
        );
    }
}
