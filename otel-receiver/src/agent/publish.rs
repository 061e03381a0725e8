//! Where the agent's windows go: the shared export state (which Prometheus and the OTLP
//! instruments read), the diagnosis-change log line and OTLP log record, the embedding
//! program's own exporters; the warning while every export fails; the bounded final export.

use std::sync::{mpsc, Arc, RwLock};
use std::time::{Duration, Instant};

use super::Exporter;
use crate::attribution::pod_owner_of;
use crate::device::DeviceFacts;
use crate::export::config::ExportConfig;
use crate::export::delivery::Delivery;
use crate::export::otlp::OtlpExport;
use crate::export::ExportState;
use crate::stop::Stop;
use crate::WindowReport;

/// The export state, the OTLP exporter and the embedding program's exporters.
pub(super) struct Publisher {
    pub(super) state: Arc<RwLock<ExportState>>,
    pub(super) otlp: Option<OtlpExport>,
    pub(super) exporters: Vec<Box<dyn Exporter>>,
}

/// Where the agent exports, in a few words (never a header's value).
pub(super) fn destinations(config: &ExportConfig) -> String {
    let mut out = Vec::new();
    if let Some(cfg) = &config.otlp {
        let m = &cfg.metrics;
        out.push(format!(
            "OTLP {:?} to {} (metrics, {:?} temporality, every {} ms, {} header(s))",
            m.protocol,
            m.endpoint,
            cfg.temporality,
            cfg.interval.as_millis(),
            m.headers.len()
        ));
        if let Some(l) = &cfg.logs {
            out.push(format!("OTLP {:?} to {} (logs)", l.protocol, l.endpoint));
        }
    } else if config.otlp_disabled {
        out.push("no OTLP (OTEL_SDK_DISABLED=true)".into());
    }
    if let Some(addr) = config.prometheus {
        out.push(format!("Prometheus on http://{addr}/metrics"));
    }
    if out.is_empty() {
        "nowhere (neither --otlp-endpoint nor --prometheus is set)".into()
    } else {
        out.join("; ")
    }
}

impl Publisher {
    /// One window into the export state; a verdict change is logged, sent as an OTLP log
    /// record, and handed with the window to every exporter.
    pub(super) fn publish(&mut self, report: &WindowReport, facts: &DeviceFacts) {
        let change = match self.state.write() {
            Ok(mut state) => state.update(report, facts),
            Err(_) => return,
        };
        if !self.exporters.is_empty() {
            if let Ok(state) = self.state.read() {
                for exporter in &mut self.exporters {
                    exporter.window(report, facts, change.as_ref(), &state);
                }
            }
        }
        let Some(change) = change else { return };
        let evidence: Vec<&str> = report.evidence.iter().map(|e| e.text.as_str()).collect();
        // Whose GPU: the job, and the pod the kubelet assigned it to.
        let pod = report
            .stats
            .pods
            .as_deref()
            .and_then(|p| pod_owner_of(p))
            .map(|o| format!("{}/{}", o.namespace, o.pod));
        tracing::info!(
            gpu = change.gpu,
            class = change.to.as_str(),
            previous = change.from.map(|c| c.as_str()),
            job = report.job.as_deref(),
            pod = pod.as_deref(),
            power_w = report.signals.power_w,
            sm_active = report.signals.sm_pct.map(|p| p / 100.0),
            efficiency = report.efficiency,
            evidence = %evidence.join("; "),
            remedy = report.remedy(),
            "diagnosis changed"
        );
        if let (Some(otlp), Ok(state)) = (&self.otlp, self.state.read()) {
            if let Some(view) = state.get(change.gpu) {
                otlp.log_change(&change, view);
            }
        }
    }
}

/// Warns while every export fails: after 10 s of failures, then 20, 40, … up to hourly.
pub(super) struct FailureWarning {
    endpoint: String,
    next: Duration,
    checked: Instant,
}

impl FailureWarning {
    pub(super) fn new(endpoint: String) -> FailureWarning {
        FailureWarning {
            endpoint,
            next: Duration::from_secs(10),
            checked: Instant::now(),
        }
    }

    pub(super) fn poll(&mut self, delivery: &Delivery) {
        if self.checked.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.checked = Instant::now();
        let Some(since) = delivery.failing_since() else {
            self.next = Duration::from_secs(10);
            return;
        };
        let failing = since.elapsed();
        if failing < self.next {
            return;
        }
        let counts = delivery.counts();
        let reasons: Vec<String> = counts
            .exports_failed
            .iter()
            .map(|((signal, reason), n)| format!("{}/{reason}×{n}", signal.as_str()))
            .collect();
        tracing::warn!(
            endpoint = %self.endpoint,
            failing_s = failing.as_secs(),
            windows_dropped = counts.windows_dropped,
            failures = %reasons.join(", "),
            "nothing has reached the OTLP collector for a while; what cannot be delivered is counted as dropped"
        );
        self.next = (self.next * 2).min(Duration::from_secs(3600));
    }
}

/// The final export (at most `timeout`), on a thread of its own so that a second stop request
/// ends the wait at once; returns whether one did.
pub(super) fn final_export(
    otlp: OtlpExport,
    timeout: Duration,
    runtime: tokio::runtime::Handle,
    stop: &mut Stop,
    say: fn(&str),
) -> bool {
    let (hand, handed) = mpsc::channel::<OtlpExport>();
    let (done, finished) = mpsc::channel::<()>();
    let on_thread = runtime.clone();
    let spawned = std::thread::Builder::new()
        .name("gpuslack-final".into())
        .spawn(move || {
            if let Ok(otlp) = handed.recv() {
                otlp.shutdown(timeout, on_thread);
            }
            let _ = done.send(());
        });
    if let Err(e) = &spawned {
        tracing::warn!(error = %e, "no thread for the final export: a second signal cannot cut it short");
    }
    // No thread to take it: flushed here, bounded by the timeout alone.
    if let Err(mpsc::SendError(otlp)) = hand.send(otlp) {
        otlp.shutdown(timeout, runtime);
        return false;
    }
    loop {
        if let Some(signal) = stop.again(Duration::from_millis(50)) {
            say(&format!("gpuslack: {signal} received again; the final export is abandoned and what it carried counted as dropped"));
            return true;
        }
        match finished.try_recv() {
            Err(mpsc::TryRecvError::Empty) => {}
            Ok(()) | Err(mpsc::TryRecvError::Disconnected) => return false,
        }
    }
}
