//! `gpuslack doctor`: what works on this node and what does not, each finding with its reason
//! and the fix, on one screen. A node that half works (no GPM, another user's processes
//! unreadable, the kubelet socket not mounted, the collector refusing the key) otherwise runs
//! on with less, and the SRE learns it from a dashboard that stays empty.
//!
//! The checks are split by what they look at: `host` (the C library, the kernel, which
//! processes' environment and cgroup can be read, a profiler that holds the counters), `gpus`
//! (NVML, each GPU, GPM, MIG, read through the live source as the agent reads them), and
//! `endpoints` (the kubelet's socket, one empty OTLP export, the Prometheus port). Each
//! returns [`Finding`]s; [`Doctor`] collects them and decides the exit.

pub mod endpoints;
pub mod gpus;
pub mod host;

use serde::Serialize;

/// How a finding stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Works as configured.
    Ok,
    /// Facts worth knowing (versions, a GPU's model); nothing to act on.
    Info,
    /// Not asked for by the configuration (no OTLP endpoint, not a Kubernetes node).
    Skipped,
    /// Works with less: the agent runs on, and some evidence or attribution is missing.
    Degraded,
    /// Something the configuration asks for does not work.
    Failed,
}

impl Status {
    /// The mark a person reads in the first column.
    pub fn mark(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Skipped => "skip",
            Status::Degraded => "WARN",
            Status::Failed => "FAIL",
        }
    }
}

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Area {
    /// The C library, the kernel, the architecture.
    Host,
    /// Which processes' environment and cgroup can be read.
    Processes,
    /// A profiler that holds the GPU's performance counters.
    Profiler,
    /// The driver's NVML library.
    Nvml,
    /// One GPU: its facts, GPM, its specification.
    Gpu,
    /// The kubelet's PodResources socket.
    Kubelet,
    /// The OTLP collector.
    Otlp,
    /// The Prometheus endpoint's address.
    Prometheus,
}

impl Area {
    /// Its name in the report and in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Area::Host => "host",
            Area::Processes => "processes",
            Area::Profiler => "profiler",
            Area::Nvml => "nvml",
            Area::Gpu => "gpu",
            Area::Kubelet => "kubelet",
            Area::Otlp => "otlp",
            Area::Prometheus => "prometheus",
        }
    }
}

/// One finding: what was looked at, how it stands, why, and what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// What it is about.
    pub area: Area,
    /// How it stands.
    pub status: Status,
    /// One sentence with its numbers; outside text (a GPU's name, a process's) already shown
    /// safely (`shown`).
    pub detail: String,
    /// The change that would make it work, where one is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    /// A finding without a fix.
    pub fn new(area: Area, status: Status, detail: impl Into<String>) -> Finding {
        Finding {
            area,
            status,
            detail: detail.into(),
            fix: None,
        }
    }

    /// The same finding with the change that would make it work.
    pub fn fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = Some(fix.into());
        self
    }
}

/// Every finding of one run, in the order they were made.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Doctor {
    /// In the order the checks ran.
    pub findings: Vec<Finding>,
}

/// How a doctor run ends: what its exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Everything the configuration asks for works (degraded findings allowed).
    Healthy,
    /// NVML or every GPU is out of reach: the node cannot be watched at all.
    NoGpu,
    /// Something else the configuration asks for fails.
    Failed,
}

impl Doctor {
    /// Adds the findings of one check.
    pub fn add(&mut self, findings: impl IntoIterator<Item = Finding>) {
        self.findings.extend(findings);
    }

    /// Counts by status, for the closing line.
    pub fn count(&self, status: Status) -> usize {
        self.findings.iter().filter(|f| f.status == status).count()
    }

    /// How the run ends: no GPU wins over other failures (a node without one is told apart
    /// from a wrong flag and a refused key, as `--require-gpu` does).
    pub fn verdict(&self) -> Verdict {
        let failed = |area: Area| {
            self.findings
                .iter()
                .any(|f| f.area == area && f.status == Status::Failed)
        };
        let gpus_ok = self
            .findings
            .iter()
            .any(|f| f.area == Area::Gpu && f.status != Status::Failed);
        if failed(Area::Nvml) || !gpus_ok {
            Verdict::NoGpu
        } else if self.findings.iter().any(|f| f.status == Status::Failed) {
            Verdict::Failed
        } else {
            Verdict::Healthy
        }
    }

    /// The findings as the agent's startup log says them, once: one line of counts, then a
    /// warning for each finding that is degraded or failed, with its fix.
    pub fn log(&self) {
        tracing::info!(
            ok = self.count(Status::Ok),
            degraded = self.count(Status::Degraded),
            failed = self.count(Status::Failed),
            "node check (`gpuslack doctor` for all of it)"
        );
        for f in &self.findings {
            match f.status {
                Status::Info => tracing::info!(area = f.area.as_str(), "{}", f.detail),
                Status::Degraded | Status::Failed => tracing::warn!(
                    area = f.area.as_str(),
                    fix = f.fix.as_deref().unwrap_or(""),
                    "{}",
                    f.detail
                ),
                Status::Ok | Status::Skipped => {}
            }
        }
    }

    /// The report a person reads: one line a finding (the mark, the area, the detail), its fix
    /// indented beneath, then the counts.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            out.push_str(&format!(
                "{:<5} {:<11} {}\n",
                f.status.mark(),
                f.area.as_str(),
                f.detail
            ));
            if let Some(fix) = &f.fix {
                out.push_str(&format!("{:<17} fix: {fix}\n", ""));
            }
        }
        out.push_str(&format!(
            "{} ok, {} degraded, {} failed, {} skipped: {}\n",
            self.count(Status::Ok),
            self.count(Status::Degraded),
            self.count(Status::Failed),
            self.count(Status::Skipped),
            match self.verdict() {
                Verdict::Healthy => "everything configured works",
                Verdict::NoGpu => "no GPU can be watched on this node",
                Verdict::Failed => "something configured does not work (FAIL above)",
            }
        ));
        out
    }
}

/// Outside text (a GPU's name, a process's, an error from a server) as one line a terminal
/// shows literally: the crate's one sanitiser (control characters and bidirectional marks
/// escaped), capped as a message is.
pub fn shown(text: &str) -> String {
    crate::text::message(text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(area: Area, status: Status) -> Finding {
        Finding::new(area, status, "x")
    }

    #[test]
    fn no_gpu_wins_over_other_failures_and_degraded_findings_do_not_fail() {
        let mut d = Doctor::default();
        d.add([
            finding(Area::Gpu, Status::Ok),
            finding(Area::Processes, Status::Degraded),
        ]);
        assert_eq!(d.verdict(), Verdict::Healthy);
        d.add([finding(Area::Otlp, Status::Failed)]);
        assert_eq!(d.verdict(), Verdict::Failed);
        d.add([finding(Area::Nvml, Status::Failed)]);
        assert_eq!(d.verdict(), Verdict::NoGpu);
    }

    #[test]
    fn without_any_gpu_finding_the_node_has_no_gpu() {
        let mut d = Doctor::default();
        d.add([finding(Area::Host, Status::Info)]);
        assert_eq!(d.verdict(), Verdict::NoGpu);
    }

    #[test]
    fn outside_text_is_shown_escaped() {
        let escaped = shown("a\x1b]0;pwned\x07b\u{202e}");
        assert!(
            !escaped.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{escaped}"
        );
        assert!(
            escaped.starts_with('a') && escaped.contains("]0;pwned"),
            "{escaped}"
        );
    }

    #[test]
    fn the_text_report_puts_each_fix_under_its_finding_and_counts() {
        let mut d = Doctor::default();
        d.add([
            Finding::new(Area::Gpu, Status::Ok, "GPU 0: NVIDIA H200"),
            Finding::new(Area::Otlp, Status::Failed, "refused").fix("check the key"),
        ]);
        let text = d.text();
        assert!(
            text.contains("ok    gpu         GPU 0: NVIDIA H200\n"),
            "{text}"
        );
        assert!(
            text.contains("FAIL  otlp        refused\n                  fix: check the key\n"),
            "{text}"
        );
        assert!(text.ends_with("1 ok, 0 degraded, 1 failed, 0 skipped: something configured does not work (FAIL above)\n"), "{text}");
    }
}
