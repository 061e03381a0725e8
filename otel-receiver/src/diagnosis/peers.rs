//! What only several GPUs seen together can tell: who waits for whom in a collective, GPUs
//! that move in step (a seesaw of bubbles), and the rank a hung collective is waiting for.
//! Runs after every GPU's window of one time slot has its own verdict.

use super::evidence::{pct, Evidence};
use super::{Class, Thresholds, WindowReport};

pub fn explain(frame: &mut [WindowReport], th: &Thresholds) {
    explain_collective(frame, th);
    explain_hang(frame);
}

/// GPUs exchanging NVLink traffic in the same window form one collective group.
fn explain_collective(frame: &mut [WindowReport], th: &Thresholds) {
    let group: Vec<usize> = (0..frame.len())
        .filter(|&i| frame[i].signals.nvlink_mib_s.unwrap_or(0.0) >= th.collective_nvlink_mib_s)
        .collect();
    if group.len() < 2 {
        return;
    }
    let sms: Vec<f64> = frame
        .iter()
        .map(|r| r.signals.sm_pct.unwrap_or(0.0))
        .collect();
    let sm = |i: usize| sms[i];
    let Some(&leader) = group.iter().max_by(|&&a, &&b| sm(a).total_cmp(&sm(b))) else {
        return;
    };
    let leader_gpu = frame[leader].stats.gpu;
    let leader_sm = sm(leader);
    let waiters: Vec<usize> = group
        .iter()
        .copied()
        .filter(|&i| i != leader && leader_sm - sm(i) >= th.straggler_gap_pct)
        .collect();
    if waiters.is_empty() {
        // Everyone at the same partial activity: they take turns.
        let gpus: Vec<String> = group
            .iter()
            .map(|&i| frame[i].stats.gpu.to_string())
            .collect();
        for &i in &group {
            if frame[i].class != Class::SyncWait {
                continue;
            }
            let text = format!(
                "GPUs {} run at the same partial SM activity (~{}): they take turns waiting for each other — pipeline bubbles or an all-reduce not overlapped with compute",
                gpus.join(" and "),
                pct(sm(i))
            );
            frame[i].evidence.push(Evidence::new(
                "sm_gap_to_busiest_peer",
                leader_sm - sm(i),
                Some(th.straggler_gap_pct),
                text,
            ));
        }
        return;
    }
    for &i in &waiters {
        let text = format!(
            "it waits for GPU {leader_gpu} (SM {} there vs {} here): GPU {leader_gpu} is the straggler",
            pct(leader_sm),
            pct(sm(i))
        );
        frame[i].evidence.push(Evidence::new(
            "sm_gap_to_busiest_peer",
            leader_sm - sm(i),
            Some(th.straggler_gap_pct),
            text,
        ));
    }
    let list: Vec<String> = waiters
        .iter()
        .map(|&i| frame[i].stats.gpu.to_string())
        .collect();
    let text = format!(
        "GPU(s) {} wait on this GPU in their collectives: it is the straggler; even out its share of the work or look for what slows this rank",
        list.join(", ")
    );
    frame[leader].evidence.push(Evidence::new(
        "waiting_peers",
        waiters.len() as f64,
        None,
        text,
    ));
}

/// A GPU hung in a collective and a peer that holds a context but runs nothing: the peer is
/// likely the rank that never reached the collective.
fn explain_hang(frame: &mut [WindowReport]) {
    let hung: Vec<u32> = frame
        .iter()
        .filter(|r| r.class == Class::Hung)
        .map(|r| r.stats.gpu)
        .collect();
    if hung.is_empty() {
        return;
    }
    let list: Vec<String> = hung.iter().map(u32::to_string).collect();
    for report in frame.iter_mut().filter(|r| r.class == Class::IdleHeld) {
        report.evidence.push(Evidence::new(
            "hung_peers",
            hung.len() as f64,
            None,
            format!(
                "GPU {} spins in a collective while this GPU holds a context and runs nothing: this is likely the rank that never joined it",
                list.join(", ")
            ),
        ));
    }
}
