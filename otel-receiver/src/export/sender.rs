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
//! Over HTTP it sends through [`OtlpHttpClient`] (headers, no redirects, partial success,
//! `Retry-After`) to the signal's path; over gRPC through tonic's `MetricsService` or
//! `LogsService` client ([`GrpcExport`]), with the same headers as metadata and the collector's
//! partial success read from the answer. A `Retry-After` holds both signals' senders: it is
//! the collector's, not one request's.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use opentelemetry_http::HttpClient as _;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;

use super::delivery::{reason, reason_in_text, Delivery, RejectionLog};
use super::http_client::OtlpHttpClient;
use super::queue::{Batch, Payload, SendQueue};

/// What became of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// Worth another try later, filed under this reason.
    Retry(&'static str),
    /// The intake refused the request's size: halve it.
    TooLarge,
    /// Refused for good, filed under this reason: the batch is dropped.
    Refused(&'static str),
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
                    let mut parts: Vec<Batch<R>> = super::split::to_fit(request, l)
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

/// OTLP/HTTP: the protobuf, gzipped unless turned off, POSTed through our client to the
/// signal's URL.
pub struct HttpTransport {
    pub client: OtlpHttpClient,
    pub url: String,
    pub gzip: bool,
}

/// Runs a future that does its work when polled (our HTTP client's: reqwest's blocking client
/// behind an async signature) outside any tokio runtime: the blocking client must not be used
/// or dropped inside one, where it panics.
fn poll_to_end<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut context) {
            return out;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::default(),
    );
    encoder.write_all(bytes)?;
    encoder.finish()
}

/// The outcome an HTTP status stands for.
pub fn http_outcome(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        413 => Outcome::TooLarge,
        300..=399 => Outcome::Refused(reason::REDIRECTED),
        401 | 403 => Outcome::Refused(reason::AUTH),
        408 => Outcome::Retry(reason::TIMEOUT),
        429 => Outcome::Retry(reason::THROTTLED),
        502..=504 => Outcome::Retry(reason::UNAVAILABLE),
        400..=499 => Outcome::Refused(reason::REJECTED),
        _ => Outcome::Retry(reason::OTHER),
    }
}

impl<R: Payload> Transport<R> for HttpTransport {
    fn send(&mut self, encoded: &[u8]) -> Outcome {
        let (body, encoding) = if self.gzip {
            match gzip(encoded) {
                Ok(zipped) => (zipped, Some("gzip")),
                Err(_) => (encoded.to_vec(), None),
            }
        } else {
            (encoded.to_vec(), None)
        };
        let mut builder = http::Request::builder()
            .method(http::Method::POST)
            .uri(&self.url)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf");
        if let Some(encoding) = encoding {
            builder = builder.header(http::header::CONTENT_ENCODING, encoding);
        }
        let Ok(http_request) = builder.body(Bytes::from(body)) else {
            return Outcome::Refused(reason::OTHER);
        };
        // The client notes the failure's reason, the Retry-After and the partial success.
        match poll_to_end(self.client.send_bytes(http_request)) {
            Ok(response) => http_outcome(response.status().as_u16()),
            Err(_) => Outcome::Retry(reason::NETWORK),
        }
    }
}

/// How a signal's request goes over gRPC: its service's generated client, and where the
/// answer's partial success says how many items the collector rejected.
pub trait GrpcExport: Payload {
    /// Sends `request` over `channel` (gzipped if `gzip`); the partial success's rejected
    /// items and message.
    fn export(
        channel: tonic::transport::Channel,
        gzip: bool,
        request: tonic::Request<Self>,
    ) -> impl std::future::Future<Output = Result<(i64, String), tonic::Status>>;
}

impl GrpcExport for ExportMetricsServiceRequest {
    async fn export(
        channel: tonic::transport::Channel,
        gzip: bool,
        request: tonic::Request<Self>,
    ) -> Result<(i64, String), tonic::Status> {
        let mut client = MetricsServiceClient::new(channel);
        if gzip {
            client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        let answer = client.export(request).await?.into_inner();
        Ok(answer
            .partial_success
            .map(|p| (p.rejected_data_points, p.error_message))
            .unwrap_or_default())
    }
}

impl GrpcExport for ExportLogsServiceRequest {
    async fn export(
        channel: tonic::transport::Channel,
        gzip: bool,
        request: tonic::Request<Self>,
    ) -> Result<(i64, String), tonic::Status> {
        let mut client = LogsServiceClient::new(channel);
        if gzip {
            client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        let answer = client.export(request).await?.into_inner();
        Ok(answer
            .partial_success
            .map(|p| (p.rejected_log_records, p.error_message))
            .unwrap_or_default())
    }
}

/// OTLP/gRPC through tonic's generated clients, over a channel that connects when first used.
pub struct GrpcTransport {
    pub channel: tonic::transport::Channel,
    pub gzip: bool,
    pub metadata: tonic::metadata::MetadataMap,
    pub timeout: Duration,
    pub delivery: Arc<Delivery>,
    pub rejections: RejectionLog,
    pub shown: String,
    pub runtime: tokio::runtime::Handle,
}

/// `google.rpc.Status`, as a gRPC server puts it in `grpc-status-details-bin` (tonic hands it
/// over as [`tonic::Status::details`]): only the details are read.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(message, repeated, tag = "3")]
    details: Vec<RpcAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<RpcDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The delay a gRPC status's `RetryInfo` asks for, if it carries one: the gRPC twin of HTTP's
/// `Retry-After`, which the OTLP specification tells a client to honour on `UNAVAILABLE` and
/// `RESOURCE_EXHAUSTED`. Without it a collector asking for 5 s was retried every 1.5 s. The
/// four messages are declared here with prost's derive (as the kubelet's are) rather than
/// through tonic-types, which would bring prost-types for these few fields.
pub fn retry_delay(status: &tonic::Status) -> Option<Duration> {
    use prost::Message as _;
    let details = RpcStatus::decode(status.details()).ok()?;
    details
        .details
        .iter()
        .filter(|any| any.type_url.ends_with("/google.rpc.RetryInfo"))
        .filter_map(|any| RetryInfo::decode(&any.value[..]).ok()?.retry_delay)
        .find_map(|d| {
            let seconds = u64::try_from(d.seconds).ok()?;
            let nanos = u32::try_from(d.nanos).ok()?;
            Some(Duration::from_secs(seconds) + Duration::from_nanos(u64::from(nanos)))
        })
        .filter(|d| !d.is_zero())
}

/// The outcome a gRPC status stands for, with the reason it is filed under.
pub fn grpc_outcome(status: &tonic::Status) -> Outcome {
    use tonic::Code;
    let text = format!("{}: {}", status.message(), crate::causes::causes(status));
    let lower = text.to_ascii_lowercase();
    if status.code() == Code::ResourceExhausted
        && (lower.contains("larger than max") || lower.contains("message length too large"))
    {
        return Outcome::TooLarge;
    }
    if let Some(why) = reason_in_text(&text) {
        return Outcome::Retry(why);
    }
    match status.code() {
        Code::Ok => Outcome::Delivered,
        Code::DeadlineExceeded => Outcome::Retry(reason::TIMEOUT),
        Code::ResourceExhausted => Outcome::Retry(reason::THROTTLED),
        Code::Unavailable if lower.contains("refused") || lower.contains("dns") => {
            Outcome::Retry(reason::CONNECT)
        }
        Code::Unavailable => Outcome::Retry(reason::UNAVAILABLE),
        Code::Unauthenticated | Code::PermissionDenied => Outcome::Refused(reason::AUTH),
        Code::InvalidArgument
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::NotFound
        | Code::AlreadyExists => Outcome::Refused(reason::REJECTED),
        Code::Cancelled | Code::Aborted | Code::Unknown | Code::Internal | Code::DataLoss => {
            Outcome::Retry(reason::NETWORK)
        }
    }
}

impl<R: GrpcExport> Transport<R> for GrpcTransport {
    fn send(&mut self, encoded: &[u8]) -> Outcome {
        // tonic's generated client takes the message: decoded for the call, one batch at a time.
        let Ok(request) = R::decode(encoded) else {
            return Outcome::Refused(reason::OTHER);
        };
        let mut call = tonic::Request::new(request);
        *call.metadata_mut() = self.metadata.clone();
        call.set_timeout(self.timeout);
        let channel = self.channel.clone();
        let gzip = self.gzip;
        let limit = self.timeout + Duration::from_millis(500);
        let answer = self.runtime.block_on(async move {
            tokio::time::timeout(limit, R::export(channel, gzip, call)).await
        });
        match answer {
            Err(_elapsed) => Outcome::Retry(reason::TIMEOUT),
            Ok(Ok((rejected, message))) => {
                let rejected = u64::try_from(rejected).unwrap_or(0);
                if rejected > 0 {
                    self.delivery.note_rejected(R::SIGNAL, rejected);
                }
                if rejected > 0 || !message.is_empty() {
                    self.rejections
                        .log(&self.shown, R::SIGNAL, rejected, &message);
                }
                Outcome::Delivered
            }
            Ok(Err(status)) => {
                let outcome = grpc_outcome(&status);
                // The collector said when to come back: both senders wait until then, as for
                // an HTTP Retry-After (the hold is capped at 10 minutes).
                if let (Outcome::Retry(_), Some(delay)) = (outcome, retry_delay(&status)) {
                    self.delivery.hold_for(delay);
                }
                if let Outcome::Retry(why) | Outcome::Refused(why) = outcome {
                    self.rejections.log_failure(
                        &self.shown,
                        why,
                        &format!("{:?}: {}", status.code(), status.message()),
                    );
                }
                outcome
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::delivery::Signal;
    use super::*;
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
                sent.push(super::super::split::points(&request));
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
                .map(|r| super::super::split::points(&r))
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
    fn retry_info_in_a_status_s_details_is_the_delay_to_wait() {
        let retry = |seconds: i64, nanos: i32| RpcStatus {
            details: vec![
                RpcAny {
                    type_url: "type.googleapis.com/google.rpc.ErrorInfo".into(),
                    value: vec![1, 2, 3],
                },
                RpcAny {
                    type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                    value: RetryInfo {
                        retry_delay: Some(RpcDuration { seconds, nanos }),
                    }
                    .encode_to_vec(),
                },
            ],
        };
        let status = |details: RpcStatus| {
            tonic::Status::with_details(
                tonic::Code::ResourceExhausted,
                "slow down",
                details.encode_to_vec().into(),
            )
        };
        assert_eq!(
            retry_delay(&status(retry(5, 0))),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            retry_delay(&status(retry(0, 250_000_000))),
            Some(Duration::from_millis(250))
        );
        // None, zero, negative or garbage: no delay of the collector's.
        assert_eq!(
            retry_delay(&tonic::Status::resource_exhausted("slow down")),
            None
        );
        assert_eq!(retry_delay(&status(retry(0, 0))), None);
        assert_eq!(retry_delay(&status(retry(-1, 0))), None);
        let garbage = tonic::Status::with_details(
            tonic::Code::ResourceExhausted,
            "x",
            vec![0xff, 0xff, 0xff].into(),
        );
        assert_eq!(retry_delay(&garbage), None);
    }

    #[test]
    fn statuses_map_to_outcomes() {
        assert_eq!(http_outcome(200), Outcome::Delivered);
        assert_eq!(http_outcome(413), Outcome::TooLarge);
        assert_eq!(http_outcome(429), Outcome::Retry(reason::THROTTLED));
        assert_eq!(http_outcome(503), Outcome::Retry(reason::UNAVAILABLE));
        assert_eq!(http_outcome(307), Outcome::Refused(reason::REDIRECTED));
        assert_eq!(http_outcome(401), Outcome::Refused(reason::AUTH));
        assert_eq!(http_outcome(400), Outcome::Refused(reason::REJECTED));
        assert_eq!(http_outcome(500), Outcome::Retry(reason::OTHER));
        let big = tonic::Status::resource_exhausted(
            "grpc: received message after decompression larger than max (4194305 vs. 4194304)",
        );
        assert_eq!(grpc_outcome(&big), Outcome::TooLarge);
        assert_eq!(
            grpc_outcome(&tonic::Status::resource_exhausted("slow down")),
            Outcome::Retry(reason::THROTTLED)
        );
        assert_eq!(
            grpc_outcome(&tonic::Status::unauthenticated("no key")),
            Outcome::Refused(reason::AUTH)
        );
        assert_eq!(
            grpc_outcome(&tonic::Status::cancelled("Timeout expired")),
            Outcome::Retry(reason::TIMEOUT)
        );
        assert_eq!(
            grpc_outcome(&tonic::Status::unavailable(
                "tcp connect error: Connection refused"
            )),
            Outcome::Retry(reason::CONNECT)
        );
    }

    #[test]
    fn gzip_round_trips() {
        use std::io::Read as _;
        let data = request(50).encode_to_vec();
        let zipped = gzip(&data).expect("gzip");
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&zipped[..])
            .read_to_end(&mut back)
            .expect("gunzip");
        assert_eq!(back, data);
    }
}
