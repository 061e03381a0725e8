//! What every form of the report says before its details: the remedies numbered in the order
//! that pays, the bottom line's numbers, each GPU's timeline, and the first screen's content
//! (the hang, the stragglers, the profilers, the fixes ranked). The text, the JSON and the page
//! render these; none ranks or sums on its own.

use std::collections::{BTreeMap, BTreeSet};

use crate::device::DeviceFacts;
use crate::diagnosis::{Advice, Class};
use crate::report::first_screen::{self, Screen};
use crate::report::ranking::{self, PeerFacts, Severity, Standing};
use crate::report::timeline::Timeline;
use crate::report::units::{duration, energy, gpu_hours};
use crate::report::words;

use super::collect::GpuReport;
use super::{HumanReport, Prices, SourceLabel};

/// Whether a class is slack: time the GPU is held or busy without doing work at its pace.
/// Bare idle is free capacity, not slack.
pub fn is_slack(class: Class) -> bool {
    !class.is_healthy()
}

/// A remedy as the report numbers it.
#[derive(Debug, Clone, PartialEq)]
pub struct Remedy {
    /// 1-based: `[1]` in the text, `remedy_id` in the JSON.
    pub id: usize,
    /// The verdict it is the remedy of (the one it applied to longest).
    pub class: Class,
    /// What to do.
    pub text: &'static str,
    /// Which advice it is ([`words::change`] asks it for the instruction).
    pub advice: Advice,
    /// GPU time it applied to, over every GPU.
    pub seconds: f64,
    /// Energy of the windows it applied to (J).
    pub energy_j: f64,
    /// The GPUs it applied to.
    pub gpus: BTreeSet<u32>,
    /// Whether it addresses slack: a fix, ranked by the time it would recover.
    pub is_fix: bool,
    /// GPU time a change can win back (s): its slack less start-up, tear-down and one-window
    /// phases (`report/ranking.rs`); for advice, the time it applied to.
    pub won_s: f64,
    /// How its time weighs before its share: a hang and a profiler come before any slack.
    pub severity: Severity,
    /// What its windows read, means over them: the figures the change rests on.
    pub readings: first_screen::Readings,
}

/// The opening paragraph's numbers, over every GPU reported.
#[derive(Debug, Clone, PartialEq)]
pub struct BottomLine {
    /// GPUs reported on.
    pub gpus: usize,
    /// GPU time covered, summed over GPUs (s).
    pub seconds: f64,
    /// Of which slack (s).
    pub slack_seconds: f64,
    /// Energy used, summed over GPUs (J).
    pub energy_j: f64,
    /// Of which in slack windows (J).
    pub slack_energy_j: f64,
    /// The slack class with the most GPU time.
    pub top_cause: Option<(Class, f64)>,
    /// The fix to try first: the remedy that would recover the most GPU time.
    pub first_fix: Option<Remedy>,
    /// The slack's cost at the prices given; none without a price.
    pub cost: Option<f64>,
}

impl BottomLine {
    /// Slack's share of the GPU time, 0–1.
    pub fn slack_share(&self) -> f64 {
        self.slack_seconds / self.seconds.max(1e-9)
    }
    /// Slack's share of the energy, 0–1.
    pub fn slack_energy_share(&self) -> f64 {
        self.slack_energy_j / self.energy_j.max(1e-9)
    }
    /// Slack in GPU-hours.
    pub fn slack_gpu_hours(&self) -> f64 {
        self.slack_seconds / 3600.0
    }
    /// Slack windows' energy in kWh.
    pub fn slack_kwh(&self) -> f64 {
        self.slack_energy_j / 3.6e6
    }

    /// The paragraph.
    pub fn text(&self, prices: &Prices) -> String {
        if self.seconds <= 0.0 {
            return "Bottom line: no samples, nothing to diagnose.".into();
        }
        let on = if self.gpus > 1 {
            format!(" over {} GPUs", self.gpus)
        } else {
            String::new()
        };
        let Some((cause, cause_s)) = self.top_cause else {
            return format!(
                "Bottom line: no slack. Over {}{on} the GPUs either did work at their pace or sat idle with nothing holding them.",
                duration(self.seconds)
            );
        };
        let mut s = format!(
            "Bottom line: {:.0}% of the GPU time ({} of {}{on}) and {:.0}% of the energy were slack: {} GPU-hours and {}",
            100.0 * self.slack_share(),
            duration(self.slack_seconds),
            duration(self.seconds),
            100.0 * self.slack_energy_share(),
            gpu_hours(self.slack_gpu_hours()),
            energy(self.slack_energy_j),
        );
        if let Some(cost) = self.cost {
            s += &format!(", costing {cost:.2}");
            let mut at = Vec::new();
            if let Some(p) = prices.per_gpu_hour {
                at.push(format!("{p} per GPU-hour"));
            }
            if let Some(p) = prices.per_kwh {
                at.push(format!("{p} per kWh"));
            }
            s += &format!(" at {}", at.join(" and "));
        }
        // Named as the first fix names it where that fix is for the same verdict: "too few
        // blocks", not "tiny kernels", for a kernel of one block.
        let name = match &self.first_fix {
            Some(fix) if fix.class == cause => words::fix_label(fix.advice, cause),
            _ => words::label(cause),
        };
        s += &format!(
            ". Largest cause: {name} ({:.0}% of the GPU time).",
            100.0 * cause_s / self.seconds.max(1e-9)
        );
        s
    }
}

/// What every form of the report shows before its details, computed once per rendering: the
/// remedies numbered in the order that pays, and the bottom line whose first fix is one of them.
#[derive(Debug, Clone)]
pub(super) struct Summary {
    pub(super) remedies: Vec<Remedy>,
    pub(super) bottom: BottomLine,
}

impl Summary {
    /// The number of the remedy with this text (`[1]` in the text, `remedy_id` in the JSON).
    pub(super) fn remedy_id(&self, text: &str) -> usize {
        self.remedies
            .iter()
            .find(|r| r.text == text)
            .map_or(0, |r| r.id)
    }
}

impl HumanReport {
    /// Every remedy, numbered: the fixes for slack first, in the order that pays
    /// (`report/ranking.rs`: a hang, then a profiler's windows, then the time a change can win back,
    /// code before habit on a tie), then the advice for healthy and idle time.
    pub fn remedies(&self) -> Vec<Remedy> {
        let mut won: BTreeMap<&'static str, f64> = BTreeMap::new();
        for g in self.gpus.values() {
            for (remedy, w) in g.settle.totals() {
                *won.entry(remedy).or_default() += w.won_s;
            }
        }
        let mut all: Vec<Remedy> = self
            .remedies
            .iter()
            .map(|(text, u)| {
                let slack: Vec<(&Class, &f64)> =
                    u.seconds.iter().filter(|(c, _)| is_slack(**c)).collect();
                let is_fix = !slack.is_empty();
                // A fix is named after the slack it recovers, even where the same advice also
                // fits healthy time.
                let class = slack
                    .iter()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map_or(u.class(), |(c, _)| **c);
                let seconds = if is_fix {
                    slack.iter().map(|(_, s)| **s).sum::<f64>().max(0.0)
                } else {
                    u.seconds()
                };
                Remedy {
                    id: 0,
                    class,
                    text,
                    advice: u.advice,
                    seconds,
                    energy_j: u.energy_j,
                    gpus: u.gpus.clone(),
                    is_fix,
                    // What is healthy or idle is never won back; a fix wins back no more than
                    // its slack.
                    won_s: if is_fix {
                        won.get(text).copied().unwrap_or(0.0).min(seconds)
                    } else {
                        seconds
                    },
                    severity: ranking::severity(class, u.advice),
                    readings: first_screen::Readings {
                        util_pct: u.util_pct.get(),
                        sm_pct: u.sm_pct.get(),
                        power_w: u.power_w.get(),
                        tdp_w: u
                            .gpus
                            .iter()
                            .filter_map(|g| self.gpus.get(g).and_then(|r| r.tdp_w))
                            .reduce(f64::max),
                    },
                }
            })
            .collect();
        let total: f64 = self.gpus.values().map(GpuReport::seconds).sum();
        let key = |r: &Remedy| {
            ranking::rank_key(
                &Standing {
                    severity: r.severity,
                    won_s: r.won_s,
                    habit: ranking::is_habit(r.class),
                },
                total,
            )
        };
        all.sort_by(|a, b| {
            b.is_fix
                .cmp(&a.is_fix)
                .then_with(|| key(b).cmp(&key(a)))
                .then(b.seconds.total_cmp(&a.seconds))
        });
        for (i, r) in all.iter_mut().enumerate() {
            r.id = i + 1;
        }
        all
    }

    /// What every form shows before its details, computed once per rendering.
    pub(super) fn summary(&self, prices: &Prices) -> Summary {
        let remedies = self.remedies();
        let bottom = self.bottom_line_of(&remedies, prices);
        Summary { remedies, bottom }
    }

    /// The opening paragraph's numbers.
    pub fn bottom_line(&self, prices: &Prices) -> BottomLine {
        self.bottom_line_of(&self.remedies(), prices)
    }

    /// The opening paragraph's numbers, its first fix the first of `remedies` that is a fix.
    fn bottom_line_of(&self, remedies: &[Remedy], prices: &Prices) -> BottomLine {
        let mut by_class: BTreeMap<Class, f64> = BTreeMap::new();
        let (mut seconds, mut slack_s, mut energy_j, mut slack_j) = (0.0, 0.0, 0.0, 0.0);
        for g in self.gpus.values() {
            for (c, t) in &g.by_class {
                seconds += t.seconds;
                energy_j += t.energy_j;
                if is_slack(*c) {
                    slack_s += t.seconds;
                    slack_j += t.energy_j;
                    *by_class.entry(*c).or_default() += t.seconds;
                }
            }
        }
        let first_fix = remedies.iter().find(|r| r.is_fix).cloned();
        // On a tie the first fix's class is the top cause: the paragraph names one story.
        let fix_class = first_fix.as_ref().map(|r| r.class);
        let top_cause = by_class
            .into_iter()
            .max_by(|a, b| {
                a.1.total_cmp(&b.1)
                    .then((Some(a.0) == fix_class).cmp(&(Some(b.0) == fix_class)))
            })
            .filter(|(_, s)| *s > 0.0);
        BottomLine {
            gpus: self.gpus.len(),
            seconds,
            slack_seconds: slack_s,
            energy_j,
            slack_energy_j: slack_j,
            top_cause,
            first_fix,
            cost: prices.cost(slack_s / 3600.0, slack_j / 3.6e6),
        }
    }

    /// Each GPU's timeline: one band per phase (coarser past 2000 phases), its power
    /// and activity beneath.
    pub fn timelines(&self, facts: impl Fn(u32) -> DeviceFacts) -> Vec<(u32, Timeline)> {
        self.gpus
            .iter()
            .map(|(gpu, r)| {
                let f = facts(*gpu);
                let bands = r.bands.clone();
                (
                    *gpu,
                    Timeline {
                        title: format!(
                            "GPU {gpu} · {}",
                            f.name.as_deref().unwrap_or("unknown model")
                        ),
                        bands,
                        points: r.points.values().to_vec(),
                        power_max_w: r.tdp_w.or(f.tdp_w),
                        activity_label: if r.sm_sampled {
                            "SM active"
                        } else {
                            "GPU-Util"
                        },
                    },
                )
            })
            .collect()
    }

    /// The first screen's content ([`first_screen`]): the bottom line, what each GPU did and
    /// whose it was, its health, and the fixes ranked as the remedies are.
    pub(super) fn screen(
        &self,
        source: &SourceLabel,
        summary: &Summary,
        prices: &Prices,
        facts: &impl Fn(u32) -> DeviceFacts,
    ) -> Screen {
        let (remedies, bottom) = (&summary.remedies, &summary.bottom);
        let confidence = |class: Class, gpus: &BTreeSet<u32>| {
            self.gpus
                .iter()
                .filter(|(g, _)| gpus.contains(g))
                .flat_map(|(_, r)| r.phases.iter().filter(|p| p.class == class))
                .max_by(|a, b| a.count.cmp(&b.count))
                .map(|p| p.representative().confidence())
        };
        let fix = |r: &Remedy| first_screen::Fix {
            id: r.id,
            class: r.class,
            advice: r.advice,
            seconds: r.won_s,
            gpus: r.gpus.clone(),
            confidence: confidence(r.class, &r.gpus),
            severity: r.severity,
            readings: first_screen::Readings {
                tdp_w: r.readings.tdp_w.or_else(|| {
                    r.gpus
                        .iter()
                        .filter_map(|g| facts(*g).tdp_w)
                        .reduce(f64::max)
                }),
                ..r.readings
            },
        };
        let gpus = self
            .gpus
            .iter()
            .map(|(gpu, r)| {
                let mut by_class: Vec<(Class, f64)> =
                    r.by_class.iter().map(|(c, t)| (*c, t.seconds)).collect();
                by_class.sort_by(|a, b| b.1.total_cmp(&a.1));
                let mut f = facts(*gpu);
                f.tdp_w = r.tdp_w.or(f.tdp_w);
                first_screen::GpuDid {
                    gpu: *gpu,
                    facts: f,
                    by_class,
                    jobs: r.jobs.iter().cloned().collect(),
                    owner: r.owners.ranked().first().map(|(o, _)| (*o).clone()),
                    processes_sampled: r.processes_sampled,
                    health: r.health.clone(),
                    latency_peak_pct: r
                        .by_class
                        .get(&Class::LatencyBound)
                        .and_then(|t| t.headroom_pct.get()),
                    waits_on: r.peers.straggler(),
                    dram_pct: r
                        .by_class
                        .iter()
                        .filter_map(|(c, t)| t.dram_pct.get().map(|d| (*c, d)))
                        .collect(),
                }
            })
            .collect();
        // The fixes a change can act on: time it can win back, or a hang or a profiler. Those
        // whose slack was all start-up, tear-down or transitions stay among the remedies below,
        // unless nothing else is slack.
        let acts = |r: &&Remedy| r.is_fix && (r.won_s > 0.0 || r.severity > Severity::Slack);
        let fixes: Vec<first_screen::Fix> = if remedies.iter().any(|r| acts(&r)) {
            remedies.iter().filter(acts).map(fix).collect()
        } else {
            remedies
                .iter()
                .filter(|r| r.is_fix)
                .map(|r| first_screen::Fix {
                    seconds: r.seconds,
                    ..fix(r)
                })
                .collect()
        };
        Screen {
            bottom_line: bottom.text(prices),
            priced: bottom.cost.is_some(),
            gpus,
            fixes,
            advice: remedies.iter().find(|r| !r.is_fix).map(fix),
            seconds: bottom.seconds,
            hardware_lines: None,
            together: None,
            incident: self.incident(source),
            stragglers: self.stragglers(),
            profilers: self.gpus.values().fold(BTreeMap::new(), |mut all, g| {
                for (tool, s) in &g.peers.profilers {
                    *all.entry(tool.clone()).or_default() += s;
                }
                all
            }),
        }
    }

    /// The hang, if any GPU hung: every hung GPU, the longest hang, its start, and the GPUs
    /// that held their context while the others spun (all of them is no one in particular).
    fn incident(&self, source: &SourceLabel) -> Option<first_screen::Incident> {
        let hung: Vec<(u32, &PeerFacts)> = self
            .gpus
            .iter()
            .filter(|(_, r)| r.peers.hung_s > 0.0)
            .map(|(g, r)| (*g, &r.peers))
            .collect();
        let since = hung
            .iter()
            .filter_map(|(_, p)| p.hung_since)
            .reduce(f64::min)?;
        let held: BTreeSet<u32> = hung
            .iter()
            .filter(|(_, p)| p.held_in_hang)
            .map(|(g, _)| *g)
            .collect();
        Some(first_screen::Incident {
            gpus: hung.iter().map(|(g, _)| *g).collect(),
            // From the stall's start: the kernel spun `long_spin_s` before it was called hung.
            hung_s: hung
                .iter()
                .map(|(_, p)| match (p.hung_since, p.hung_until) {
                    (Some(since), Some(until)) => (until - since).max(p.hung_s),
                    _ => p.hung_s,
                })
                .fold(0.0, f64::max),
            since,
            culprits: if held.len() < hung.len() {
                held
            } else {
                BTreeSet::new()
            },
            ranks: hung
                .iter()
                .filter(|(_, p)| !p.ranks.is_empty())
                .map(|(g, p)| (*g, p.ranks.clone()))
                .collect(),
            processes: hung
                .iter()
                .filter(|(_, p)| !p.hung_processes.is_empty())
                .map(|(g, p)| (*g, p.hung_processes.clone()))
                .collect(),
            host: match source {
                SourceLabel::Live { host, .. } => Some(host.clone()),
                _ => None,
            },
        })
    }

    /// The GPUs others waited on, most waited on first, with each waiter's time.
    fn stragglers(&self) -> Vec<first_screen::Straggler> {
        let mut by_leader: BTreeMap<u32, BTreeMap<u32, (f64, f64)>> = BTreeMap::new();
        for (gpu, r) in &self.gpus {
            for (leader, s) in &r.peers.waits_on {
                by_leader
                    .entry(*leader)
                    .or_default()
                    .insert(*gpu, (*s, r.seconds()));
            }
        }
        let mut all: Vec<first_screen::Straggler> = by_leader
            .into_iter()
            .map(|(gpu, waiters)| first_screen::Straggler {
                gpu,
                waiters,
                ranks: self
                    .gpus
                    .get(&gpu)
                    .map(|r| r.peers.ranks.clone())
                    .unwrap_or_default(),
            })
            .collect();
        let waited = |s: &first_screen::Straggler| s.waiters.values().map(|w| w.0).sum::<f64>();
        all.sort_by(|a, b| waited(b).total_cmp(&waited(a)));
        all
    }
}
