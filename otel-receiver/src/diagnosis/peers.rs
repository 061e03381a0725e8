//! What only several GPUs seen together can tell: who waits for whom in a collective, GPUs
//! that move in step (a seesaw of bubbles), and a hang, which is a fact about a job, not a GPU.
//! Runs after every GPU's window of one time slot has its own verdict, within each job's GPUs
//! (one group of all GPUs where no job is known), so one job's waiting is never blamed on
//! another job's rank.

use std::collections::BTreeMap;

use super::evidence::{pct, Evidence};
use super::remedy::Advice;
use super::rules::Rule;
use super::{Class, StallKind, Thresholds, WindowReport};

pub fn explain(frame: &mut [WindowReport], th: &Thresholds) {
    for group in job_groups(frame) {
        explain_collective(frame, &group, th);
        explain_by_power(frame, &group, th);
        explain_hang(frame, &group, th);
    }
}

/// The GPUs of each job, by index into the frame. GPUs with no job known form one group.
fn job_groups(frame: &[WindowReport]) -> Vec<Vec<usize>> {
    let mut groups: BTreeMap<Option<&str>, Vec<usize>> = BTreeMap::new();
    for (i, r) in frame.iter().enumerate() {
        groups.entry(r.job.as_deref()).or_default().push(i);
    }
    groups.into_values().collect()
}

fn gpu_list(frame: &[WindowReport], members: &[usize]) -> String {
    let gpus: Vec<String> = members
        .iter()
        .map(|&i| frame[i].stats.gpu.to_string())
        .collect();
    gpus.join(", ")
}

/// How busy a GPU is, for comparing peers: SM activity (%) with GPM, else its power load
/// scaled to the same 0–100.
fn activity(r: &WindowReport) -> Option<f64> {
    r.signals.sm_pct.or_else(|| r.power.load.map(|l| l * 100.0))
}

/// GPUs exchanging NVLink traffic in the same window form one collective.
fn explain_collective(frame: &mut [WindowReport], group: &[usize], th: &Thresholds) {
    let members: Vec<usize> = group
        .iter()
        .copied()
        .filter(|&i| frame[i].signals.nvlink_mib_s.unwrap_or(0.0) >= th.collective_nvlink_mib_s)
        .collect();
    if members.len() < 2 {
        return;
    }
    let act = |i: usize| activity(&frame[i]).unwrap_or(0.0);
    let gap = if members.iter().all(|&i| frame[i].signals.has_gpm()) {
        th.straggler_gap_pct
    } else {
        th.straggler_load_gap * 100.0
    };
    let Some(&leader) = members.iter().max_by(|&&a, &&b| act(a).total_cmp(&act(b))) else {
        return;
    };
    let waiters: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&i| i != leader && act(leader) - act(i) >= gap)
        .collect();
    if waiters.is_empty() {
        take_turns(frame, &members, gap, act(leader));
    } else {
        name_straggler(frame, leader, &waiters, gap);
    }
}

/// Everyone at the same partial activity: they take turns.
fn take_turns(frame: &mut [WindowReport], members: &[usize], gap: f64, top: f64) {
    let gpus = gpu_list(frame, members);
    for &i in members {
        if frame[i].class != Class::SyncWait {
            continue;
        }
        let mine = activity(&frame[i]).unwrap_or(0.0);
        let text = format!(
            "GPUs {gpus} run at the same partial activity (~{}): they take turns waiting for each other — pipeline bubbles or an all-reduce not overlapped with compute",
            pct(mine)
        );
        frame[i].evidence.push(Evidence::new(
            "activity_gap_to_busiest_peer",
            top - mine,
            Some(gap),
            text,
        ));
    }
}

fn name_straggler(frame: &mut [WindowReport], leader: usize, waiters: &[usize], gap: f64) {
    let leader_gpu = frame[leader].stats.gpu;
    let top = activity(&frame[leader]).unwrap_or(0.0);
    let what = if frame[leader].signals.has_gpm() {
        "SM"
    } else {
        "power load"
    };
    for &i in waiters {
        let mine = activity(&frame[i]).unwrap_or(0.0);
        let text = format!(
            "it waits for GPU {leader_gpu} ({what} {} there vs {} here): GPU {leader_gpu} is the straggler",
            pct(top),
            pct(mine)
        );
        frame[i].evidence.push(Evidence::new(
            "activity_gap_to_busiest_peer",
            top - mine,
            Some(gap),
            text,
        ));
        frame[i].waits_on = Some(leader_gpu);
    }
    let text = format!(
        "GPU(s) {} wait on this GPU in their collectives: it is the straggler; even out its share of the work or look for what slows this rank",
        gpu_list(frame, waiters)
    );
    frame[leader].evidence.push(Evidence::new(
        "waiting_peers",
        waiters.len() as f64,
        None,
        text,
    ));
}

/// Without link rates, a collective shows in power: GPUs of one job with a kernel always
/// resident that hit their power cap in bursts yet average well under it alternate work with
/// waits. One far busier than another is the straggler the other waits for (the straggler
/// all-reduce: 0.99 against 0.44); all at the same partial load take turns (the pipeline
/// seesaw: 0.69 and 0.69). A GPU computing steadily averages near its cap (bf16 GEMM: 0.98),
/// and one computing below its cap is never capped (the FP32 FMA chain: 0.51, no cap).
fn explain_by_power(frame: &mut [WindowReport], group: &[usize], th: &Thresholds) {
    let members: Vec<usize> = group
        .iter()
        .copied()
        .filter(|&i| {
            let r = &frame[i];
            r.signals.nvlink_mib_s.is_none()
                && r.signals.util_pct.unwrap_or(0.0) >= 80.0
                && r.power.load.is_some()
                && r.stall.is_none()
        })
        .collect();
    if members.len() < 2 {
        return;
    }
    let load = |r: &WindowReport| r.power.load.unwrap_or(0.0);
    let bursty = |r: &WindowReport| {
        r.signals.power_capped_share.unwrap_or(0.0) >= th.capped_share
            && load(r) < th.capped_bursts_load_max
    };
    let Some(&leader) = members
        .iter()
        .max_by(|&&a, &&b| load(&frame[a]).total_cmp(&load(&frame[b])))
    else {
        return;
    };
    let gap = th.straggler_load_gap * 100.0;
    let waiters: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&i| {
            i != leader
                && bursty(&frame[i])
                && (load(&frame[leader]) - load(&frame[i])) * 100.0 >= gap
        })
        .collect();
    let evidence = |r: &WindowReport| {
        Evidence::new(
            "power_capped_share",
            r.signals.power_capped_share.unwrap_or(0.0),
            Some(th.capped_share),
            format!(
                "it hits its power cap in {} of the samples yet averages {} of the way to full power: work alternates with waits (no link rates: judged from power)",
                pct(r.signals.power_capped_share.unwrap_or(0.0) * 100.0),
                pct(load(r).max(0.0) * 100.0)
            ),
        )
    };
    if !waiters.is_empty() {
        for &i in &waiters {
            let ev = evidence(&frame[i]);
            let r = &mut frame[i];
            r.class = Class::SyncWait;
            r.rule = Rule::CollectiveByPower;
            r.found.peers = Some(Advice::Own);
            r.evidence.insert(0, ev);
        }
        name_straggler(frame, leader, &waiters, gap);
        return;
    }
    if members.iter().all(|&i| bursty(&frame[i])) {
        for &i in &members {
            let ev = evidence(&frame[i]);
            let r = &mut frame[i];
            r.class = Class::SyncWait;
            r.rule = Rule::CollectiveByPower;
            r.found.peers = Some(Advice::Own);
            r.evidence.insert(0, ev);
        }
        let top = load(&frame[leader]) * 100.0;
        take_turns(frame, &members, gap, top);
    }
}

/// A hang is a job-level fact: GPUs of one job that stopped at the same moment and have made
/// no progress since (a kernel spinning, or a context held with nothing running) are all hung,
/// whatever their SM level, once one of them has spun for `hang_after_s` after the others
/// stopped with it. The GPU whose stall differs (holding its context while the others spin in
/// the collective) is named as the likely culprit.
fn explain_hang(frame: &mut [WindowReport], group: &[usize], th: &Thresholds) {
    let stalled: Vec<usize> = group
        .iter()
        .copied()
        .filter(|&i| frame[i].stall.is_some())
        .collect();
    if stalled.len() < 2 {
        // One GPU alone: its own spin rule decides.
        return;
    }
    let window_s = frame[stalled[0]].stats.duration_s();
    // The anchor: the longest spin among the stalled GPUs. Peers stopped with it when their
    // activity ended within a window and a half of its own and their stall began with its.
    let Some(&anchor) = stalled
        .iter()
        .filter(|&&i| frame[i].stall.is_some_and(|s| s.kind == StallKind::Spin))
        .max_by(|&&a, &&b| {
            let d = |i: usize| frame[i].stall.map_or(0.0, |s| s.for_s);
            d(a).total_cmp(&d(b))
        })
    else {
        return;
    };
    let Some(a) = frame[anchor].stall else { return };
    let Some(stopped) = a.stopped_at else { return };
    // The job was busy up to the stall: it stopped, it did not wind down long before.
    if a.since - stopped > 1.5 * window_s {
        return;
    }
    let together: Vec<usize> = stalled
        .iter()
        .copied()
        .filter(|&i| {
            frame[i].stall.is_some_and(|s| {
                s.stopped_at
                    .is_some_and(|t| (t - stopped).abs() <= 1.5 * window_s)
                    && (s.since - a.since).abs() <= 1.5 * window_s
            })
        })
        .collect();
    if together.len() < 2 {
        return;
    }
    let hung = a.for_s >= th.hang_after_s;
    let held: Vec<usize> = together
        .iter()
        .copied()
        .filter(|&i| frame[i].stall.is_some_and(|s| s.kind == StallKind::Held))
        .collect();
    let all = gpu_list(frame, &together);
    let culprit = (!held.is_empty() && held.len() < together.len()).then(|| gpu_list(frame, &held));
    for &i in &together {
        let r = &mut frame[i];
        let mine = r.stall.map_or(StallKind::Spin, |s| s.kind);
        let text = match (&culprit, mine) {
            (Some(_), StallKind::Held) => format!(
                "GPUs {all} stopped at the same moment {:.0} s ago; this GPU holds its context and runs nothing while the others spin in the collective: it is the likely culprit, the rank that never joined",
                a.for_s
            ),
            (Some(c), StallKind::Spin) => format!(
                "GPUs {all} stopped at the same moment {:.0} s ago and none has made progress since; likely culprit: GPU {c}, which holds its context and never joined the collective",
                a.for_s
            ),
            (None, _) => format!(
                "GPUs {all} stopped at the same moment {:.0} s ago and every one waits without progress: a mismatched collective, or a rank blocked on its host",
                a.for_s
            ),
        };
        r.evidence.push(Evidence::new(
            "stalled_peers",
            together.len() as f64,
            None,
            text,
        ));
        if hung {
            r.class = Class::Hung;
            r.rule = Rule::HungJob;
            r.found.peers = Some(Advice::HungJob);
        } else if mine == StallKind::Spin && r.class != Class::Hung {
            r.class = Class::SyncWait;
            r.rule = Rule::StalledJob;
            r.found.peers = Some(Advice::Own);
        }
    }
}
