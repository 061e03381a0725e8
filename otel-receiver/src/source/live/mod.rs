//! Live sampling: every GPU of the machine, each field on its own cadence, feeding the same
//! pipeline a replayed trace feeds. The scheduling and the graceful degradation live here and
//! are tested against a scripted reader; NVML itself lives in [`nvml`] only.
//!
//! Degradation rules: a field a driver lacks is skipped from then on and reported once; a field
//! that fails for another reason is left out of that sample and reported on the first failure
//! and every 100th after; a GPU that is lost is reported and left out while the others go on,
//! and asked again every [`REPROBE_S`] seconds: one that answers is sampled again.
//! A field the kind of device does not have at all ([`DeviceReader::fields`], e.g. power on a
//! MIG instance) is never read and never reported.

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

mod backend;
pub mod background;
pub mod nvml;
pub mod ticks;

use std::collections::BTreeSet;
use std::time::Duration;

pub use backend::{DeviceReader, Field, ReadError};

use crate::device::DeviceFacts;
use crate::sample::Sample;

/// How often each kind of field is read. The tick is the base cadence: cheap fields (2–80 µs of
/// CPU each on an H200) and GPM (120–270 µs for a sample and eleven metrics, by host) are read
/// every tick; process lists and NVLink counters every second; limits every 10 s; the energy
/// counter, which costs 3–10 ms of kernel CPU a read, every 30 ticks and at least 10 s apart;
/// memory temperature, encoder/decoder use and Xid counts every second; the health counters
/// (ECC, row remapping, replays), each NVLink's state, the fans (a probe of a fanless H200
/// cost 190–380 µs), BAR1 (370–480 µs of CPU a read on an H200) and the PCIe link's
/// generation and width (110–150 µs) every 10 s: read every
/// second, those two alone were 0.06% of a core, the whole of the 10% the overhead may grow.
/// Window power then comes from the power readings (within 1% of the energy counter in the H200
/// validation) and the counter keeps the exact total. `nvmlDeviceGetPcieThroughput` waits ~20 ms
/// a direction and costs 1.8 ms of CPU a pair on an H200: after the tick's other reads, so that
/// it never delays a GPM sample (two GPM samples under 100 ms apart read as zeros); once a
/// second on a GPU without GPM, whose copies only it shows, and every 10 s beside GPM, whose
/// own PCIe rates serve the rules (0.18% of a core per GPU at 1 s, 0.02% at 10 s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cadence {
    pub tick: Duration,
    pub energy: Duration,
    pub processes: Duration,
    pub limits: Duration,
    pub links: Duration,
    /// NVML's PCIe throughput where GPM measures PCIe too.
    pub pcie_beside_gpm: Duration,
}

impl Cadence {
    pub fn every(tick: Duration) -> Cadence {
        let second = tick.max(Duration::from_secs(1));
        Cadence {
            tick,
            energy: (tick * 30).max(Duration::from_secs(10)),
            processes: second,
            limits: tick.max(Duration::from_secs(10)),
            links: second,
            pcie_beside_gpm: tick.max(Duration::from_secs(10)),
        }
    }

    /// How often `field` is read on a GPU; `gpm` says whether GPM is read there.
    fn period(&self, field: Field, gpm: bool) -> Duration {
        match field {
            Field::Energy => self.energy,
            Field::Processes => self.processes,
            Field::Limits
            | Field::Health
            | Field::NvlinkState
            | Field::Bar1
            | Field::PcieLink
            | Field::Fan => self.limits,
            Field::PcieThroughput if gpm => self.pcie_beside_gpm,
            Field::NvlinkThroughput
            | Field::PcieThroughput
            | Field::MemoryTemperature
            | Field::Codec
            | Field::Xid => self.links,
            _ => self.tick,
        }
    }

    /// How many GPUs may have their slow fields read in one tick: enough that each is read
    /// once per its period, and at least one.
    fn slow_reads_per_tick(&self, gpus: usize) -> usize {
        let ticks_per_period = (self.links.as_secs_f64() / self.tick.as_secs_f64()).max(1.0);
        ((gpus as f64 / ticks_per_period).ceil() as usize).max(1)
    }
}

/// A lost GPU is asked again this often (s), with one cheap read.
pub const REPROBE_S: f64 = 10.0;

/// Something the operator should hear about once, not on every tick.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceEvent {
    FieldUnsupported {
        gpu: u32,
        field: Field,
    },
    ReadFailed {
        gpu: u32,
        field: Field,
        error: String,
        times: u64,
    },
    GpuLost {
        gpu: u32,
        error: String,
    },
    /// A lost GPU answered again and is sampled from now on.
    GpuBack {
        gpu: u32,
    },
}

/// What reading one field has cost so far, summed over every GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FieldCost {
    pub reads: u64,
    pub wall: Duration,
    /// CPU time of the sampling thread, when a CPU clock was given.
    pub cpu: Duration,
}

/// Reads the calling thread's CPU time; given by the binary, which may use the OS.
pub type CpuClock = fn() -> Duration;

struct Slot<D> {
    index: u32,
    reader: D,
    facts: DeviceFacts,
    lost: bool,
    /// When a lost GPU was last asked whether it is back.
    probed: Option<f64>,
    unsupported: BTreeSet<Field>,
    last_read: [Option<f64>; Field::ALL.len()],
    failures: [u64; Field::ALL.len()],
}

/// Samples a set of GPUs. Call [`LiveSource::sample`] once per tick.
pub struct LiveSource<D: DeviceReader> {
    slots: Vec<Slot<D>>,
    cadence: Cadence,
    events: Vec<SourceEvent>,
    costs: [FieldCost; Field::ALL.len()],
    cpu_clock: Option<CpuClock>,
    /// The GPU whose slow fields are read first next tick.
    slow_turn: usize,
}

impl<D: DeviceReader> LiveSource<D> {
    pub fn new(devices: Vec<(u32, D)>, cadence: Cadence) -> Self {
        let slots = devices
            .into_iter()
            .map(|(index, mut reader)| Slot {
                index,
                facts: reader.facts(),
                unsupported: Field::ALL
                    .into_iter()
                    .filter(|field| !reader.fields().contains(field))
                    .collect(),
                reader,
                lost: false,
                probed: None,
                last_read: [None; Field::ALL.len()],
                failures: [0; Field::ALL.len()],
            })
            .collect();
        LiveSource {
            slots,
            cadence,
            events: Vec::new(),
            costs: [FieldCost::default(); Field::ALL.len()],
            cpu_clock: None,
            slow_turn: 0,
        }
    }

    /// Leaves `fields` unread on every GPU, as if no GPU had them, without reporting them
    /// missing: `--no-gpm` runs the NVML-only path on a GPU that has GPM.
    pub fn without(mut self, fields: &[Field]) -> Self {
        for slot in &mut self.slots {
            slot.unsupported.extend(fields.iter().copied());
        }
        self
    }

    /// Measures each field's CPU cost with `clock` as well as its wall time.
    pub fn with_cpu_clock(mut self, clock: CpuClock) -> Self {
        self.cpu_clock = Some(clock);
        self
    }

    /// What each field has cost so far: the numbers behind the cadence defaults.
    pub fn field_costs(&self) -> Vec<(Field, FieldCost)> {
        Field::ALL.into_iter().zip(self.costs).collect()
    }

    pub fn cadence(&self) -> Cadence {
        self.cadence
    }

    /// Changes the tick (the adaptive cadence escalating or relaxing); the slow fields keep
    /// their periods, so the energy counter, process lists and limits are read as often as
    /// before whichever tick is in force.
    pub fn set_tick(&mut self, tick: Duration) {
        self.cadence.tick = tick;
    }

    /// Facts of every GPU, as read when sampling started.
    pub fn facts(&self) -> Vec<(u32, DeviceFacts)> {
        self.slots
            .iter()
            .map(|s| (s.index, s.facts.clone()))
            .collect()
    }

    /// GPUs still being sampled.
    pub fn live_gpus(&self) -> usize {
        self.slots.iter().filter(|s| !s.lost).count()
    }

    /// Events since the last call, in order.
    pub fn drain_events(&mut self) -> Vec<SourceEvent> {
        std::mem::take(&mut self.events)
    }

    /// Reads every field that is due on every live GPU. `clock` gives unix seconds for each
    /// GPU's sample, taken just before its reads. The fast fields of every GPU come first;
    /// the slow ones ([`Field::is_slow`]) after, for at most a few GPUs a tick, in turn.
    pub fn sample(&mut self, mut clock: impl FnMut() -> f64) -> Vec<Sample> {
        let mut taken: Vec<(usize, Sample)> = Vec::with_capacity(self.slots.len());
        let mut ctx = ReadContext {
            cadence: self.cadence,
            costs: &mut self.costs,
            events: &mut self.events,
            cpu_clock: self.cpu_clock,
        };
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.lost {
                let t = clock();
                if slot.probed.is_none_or(|p| t < p || t - p >= REPROBE_S) {
                    slot.probed = Some(t);
                    let mut probe = Sample::new(t, slot.index);
                    if slot.reader.read(Field::Utilization, &mut probe).is_ok() {
                        slot.lost = false;
                        slot.last_read = [None; Field::ALL.len()];
                        ctx.events.push(SourceEvent::GpuBack { gpu: slot.index });
                    }
                }
                if slot.lost {
                    continue;
                }
            }
            let t = clock();
            let mut sample = Sample::new(t, slot.index);
            ctx.read_due(slot, &mut sample, |f| !f.is_slow());
            taken.push((i, sample));
        }
        let mut budget = self.cadence.slow_reads_per_tick(taken.len());
        let n = taken.len();
        for k in 0..n {
            if budget == 0 {
                break;
            }
            let (i, sample) = &mut taken[(self.slow_turn + k) % n];
            let slot = &mut self.slots[*i];
            if slot.lost || !ctx.any_due(slot, sample.t, Field::is_slow) {
                continue;
            }
            ctx.read_due(slot, sample, Field::is_slow);
            budget -= 1;
        }
        if n > 0 {
            self.slow_turn = (self.slow_turn + 1) % n;
        }
        taken
            .into_iter()
            .filter(|(i, s)| !self.slots[*i].lost && !s.is_empty())
            .map(|(_, s)| s)
            .collect()
    }

    /// What each reader counted of its own accord, summed over GPUs, by name.
    pub fn reader_counters(&self) -> Vec<(&'static str, u64)> {
        let mut out: Vec<(&'static str, u64)> = Vec::new();
        for slot in &self.slots {
            for (name, n) in slot.reader.counters() {
                match out.iter_mut().find(|(k, _)| *k == name) {
                    Some((_, total)) => *total += n,
                    None => out.push((name, n)),
                }
            }
        }
        out
    }
}

/// The sampler's bookkeeping that every read updates.
struct ReadContext<'a> {
    cadence: Cadence,
    costs: &'a mut [FieldCost; Field::ALL.len()],
    events: &'a mut Vec<SourceEvent>,
    cpu_clock: Option<CpuClock>,
}

impl ReadContext<'_> {
    fn due<D>(&self, slot: &Slot<D>, i: usize, field: Field, t: f64) -> bool {
        let slack = self.cadence.tick.as_secs_f64() / 2.0;
        let gpm = !slot.unsupported.contains(&Field::Gpm);
        let period = self.cadence.period(field, gpm).as_secs_f64();
        // A clock that stepped back makes every field due: "last read in the future" must not
        // mean "not due for an hour".
        !slot.unsupported.contains(&field)
            && slot.last_read[i].is_none_or(|last| t < last || t - last + slack >= period)
    }

    fn any_due<D>(&self, slot: &Slot<D>, t: f64, which: impl Fn(Field) -> bool) -> bool {
        Field::ALL
            .into_iter()
            .enumerate()
            .any(|(i, f)| which(f) && self.due(slot, i, f, t))
    }

    /// Reads the due fields `which` selects into `sample`, handling each outcome.
    fn read_due<D: DeviceReader>(
        &mut self,
        slot: &mut Slot<D>,
        sample: &mut Sample,
        which: impl Fn(Field) -> bool,
    ) {
        let t = sample.t;
        for (i, field) in Field::ALL.into_iter().enumerate() {
            if slot.lost {
                return;
            }
            if !which(field) || !self.due(slot, i, field, t) {
                continue;
            }
            let wall_start = std::time::Instant::now();
            let cpu_start = self.cpu_clock.map(|clock| clock());
            let result = slot.reader.read(field, sample);
            let cost = &mut self.costs[i];
            cost.reads += 1;
            cost.wall += wall_start.elapsed();
            if let (Some(clock), Some(start)) = (self.cpu_clock, cpu_start) {
                cost.cpu += clock().saturating_sub(start);
            }
            match result {
                Ok(()) => {
                    slot.last_read[i] = Some(t);
                    slot.failures[i] = 0;
                }
                Err(ReadError::NotSupported) => {
                    slot.unsupported.insert(field);
                    self.events.push(SourceEvent::FieldUnsupported {
                        gpu: slot.index,
                        field,
                    });
                }
                Err(ReadError::GpuLost(error)) => {
                    slot.lost = true;
                    slot.probed = Some(t);
                    self.events.push(SourceEvent::GpuLost {
                        gpu: slot.index,
                        error,
                    });
                }
                Err(ReadError::Failed(error)) => {
                    // Try again next tick, but do not wait a whole slow period.
                    slot.failures[i] += 1;
                    let times = slot.failures[i];
                    if times == 1 || times.is_multiple_of(100) {
                        self.events.push(SourceEvent::ReadFailed {
                            gpu: slot.index,
                            field,
                            error,
                            times,
                        });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::sample::Metric;

    /// A scripted GPU: each field answers with a fixed value or error; `lose_after` makes every
    /// read fail as lost after that many reads.
    #[derive(Default)]
    struct Scripted {
        answers: BTreeMap<Field, Result<f64, ReadError>>,
        reads: BTreeMap<Field, u32>,
        lose_after: Option<u32>,
        total_reads: u32,
        /// Like a MIG instance: only these fields exist (all when `None`).
        offers: Option<&'static [Field]>,
        /// Every read, in order.
        order: Vec<Field>,
        /// After being lost, answer again from this read on.
        back_after: Option<u32>,
        /// This field times out on every n-th read of it.
        times_out: Option<(Field, u32)>,
    }

    impl Scripted {
        fn healthy() -> Self {
            let mut s = Scripted::default();
            for field in Field::ALL {
                s.answers.insert(field, Ok(1.0));
            }
            s
        }
    }

    impl DeviceReader for Scripted {
        fn facts(&mut self) -> DeviceFacts {
            DeviceFacts {
                name: Some("Scripted GPU".into()),
                ..DeviceFacts::default()
            }
        }

        fn fields(&self) -> &'static [Field] {
            self.offers.unwrap_or(&Field::ALL)
        }

        fn read(&mut self, field: Field, sample: &mut Sample) -> Result<(), ReadError> {
            self.total_reads += 1;
            *self.reads.entry(field).or_default() += 1;
            self.order.push(field);
            if self.lose_after.is_some_and(|n| self.total_reads > n)
                && self.back_after.is_none_or(|n| self.total_reads <= n)
            {
                return Err(ReadError::GpuLost("fell off the bus".into()));
            }
            if let Some((slow, n)) = self.times_out {
                if slow == field && self.reads[&field].is_multiple_of(n) {
                    return Err(ReadError::Failed("Timeout".into()));
                }
            }
            let value = self
                .answers
                .get(&field)
                .cloned()
                .unwrap_or(Err(ReadError::NotSupported))?;
            let metric = match field {
                Field::Power => Metric::PowerMw,
                Field::Energy => Metric::EnergyMj,
                Field::Gpm => Metric::GpmSm,
                Field::Processes => Metric::Nprocs,
                _ => Metric::UtilGpu,
            };
            sample.set(metric, value);
            Ok(())
        }
    }

    #[test]
    fn the_tick_loop_samples_on_its_grid_until_its_deadline_and_passes_a_stop_on() {
        use crate::stop::{channel_pair, StopCause};
        use std::time::Duration;
        let cadence = Cadence::every(Duration::from_millis(20));
        let mut source = LiveSource::new(vec![(0, Scripted::healthy())], cadence);
        let no_socket = std::path::Path::new("/nonexistent/kubelet.sock");
        let attributor = ticks::attributor_for(&source, no_socket);
        let (handle, mut stop) = channel_pair();
        // A stop handed on (a watched command's) neither ends the loop nor is heard again.
        handle.stop(StopCause::REQUESTED);
        let passed = std::rc::Rc::new(std::cell::Cell::new(0));
        let seen = passed.clone();
        let mut batches = 0;
        let n = ticks::tick_loop(
            &mut source,
            attributor,
            Some(Duration::from_millis(200)),
            &mut stop,
            ticks::OnStop::PassOn(Box::new(move |_| seen.set(seen.get() + 1))),
            |samples: Vec<Sample>| -> Result<std::ops::ControlFlow<()>, ()> {
                // One GPU; none where a loaded machine delayed the read before by over half a
                // tick, so that nothing is due yet.
                assert!(samples.len() <= 1, "{samples:?}");
                batches += 1;
                Ok(std::ops::ControlFlow::Continue(()))
            },
        )
        .expect("no error");
        assert_eq!(passed.get(), 1);
        assert_eq!(n, batches);
        // On the grid, never a burst; fewer where a loaded machine held the thread back.
        assert!((3..=11).contains(&n), "{n} ticks of 20 ms in 200 ms");
    }

    #[test]
    fn live_ticks_as_a_source_end_on_a_stop_and_report_their_cost() {
        use crate::source::{Next, Source};
        use crate::stop::{channel_pair, StopCause};
        use std::time::Duration;
        let cadence = Cadence::every(Duration::from_millis(10));
        let source = LiveSource::new(vec![(0, Scripted::healthy())], cadence);
        let mut live = ticks::LiveTicks::new(source, std::path::Path::new("/nonexistent"), false);
        assert_eq!(
            live.facts().gpu(0).name.as_deref(),
            Some("Scripted GPU"),
            "the pipeline is built from each GPU's facts"
        );
        let (handle, mut stop) = channel_pair();
        // A tick that comes less than half a tick after a read delayed by a loaded machine
        // finds nothing due and samples nothing (CI's two cores, the other tests beside).
        let mut sampled = 0;
        for _ in 0..3 {
            match live.next(&mut stop, None) {
                Ok(Next::Samples(s)) => {
                    assert!(s.len() <= 1, "one GPU: {s:?}");
                    sampled += s.len();
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(sampled >= 1, "no tick sampled");
        handle.stop(StopCause::REQUESTED);
        assert!(matches!(live.next(&mut stop, None), Ok(Next::End)));
        let usage = live.usage();
        assert!(usage[0].starts_with("interval_ms gpus ticks"), "{usage:?}");
        assert!(
            usage[1].starts_with("10 1 2 "),
            "3 ticks, the first one not counted: {usage:?}"
        );
    }

    #[test]
    fn live_ticks_at_the_adaptive_cadence_escalate_then_relax_and_count_the_split() {
        use crate::source::cadence::{Adaptive, CadenceMode};
        use crate::source::{Next, Source};
        use crate::stop::channel_pair;
        // Scaled down: 20 ms relaxed, 5 ms fast for 50 ms after a trigger (the start).
        let adaptive = Adaptive {
            relaxed: Duration::from_millis(20),
            fast: Duration::from_millis(5),
            hold_s: 0.05,
        };
        let mode = CadenceMode::Adaptive(adaptive);
        let source = LiveSource::new(vec![(0, Scripted::healthy())], Cadence::every(mode.base()));
        let mut live = ticks::LiveTicks::new(source, std::path::Path::new("/nonexistent"), false)
            .with_mode(mode);
        let (_handle, mut stop) = channel_pair();
        let mut times = Vec::new();
        for _ in 0..16 {
            match live.next(&mut stop, None) {
                // A tick less than half a tick after a read that a loaded machine delayed
                // samples nothing (nothing is due yet): it still counts as a tick.
                Ok(Next::Samples(s)) => times.extend(s.first().map(|s| s.t)),
                other => panic!("{other:?}"),
            }
        }
        assert!(times.len() >= 12, "{} of 16 ticks sampled", times.len());
        let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        // The first 50 ms at 5 ms (about ten ticks), then 20 ms: never a burst of ticks.
        let first_mean_s = gaps[..5].iter().sum::<f64>() / 5.0;
        assert!(first_mean_s < 0.012, "{gaps:?}");
        assert!(
            gaps[gaps.len() - 3..].iter().all(|&g| g > 0.015),
            "{gaps:?}"
        );
        let split = live.policy().split();
        assert_eq!(split.fast_ticks + split.relaxed_ticks, 16);
        assert!((8..=12).contains(&split.fast_ticks), "{split:?}");
        assert_eq!(
            live.live().cadence().energy,
            Cadence::every(mode.base()).energy
        );
        let usage = live.usage();
        assert!(usage[1].starts_with("adaptive 1 15 "), "{usage:?}");
        assert!(
            usage
                .iter()
                .any(|l| l.starts_with("cadence_triggers start=1 ")),
            "{usage:?}"
        );
    }

    fn ticks<D: DeviceReader>(source: &mut LiveSource<D>, n: u32, tick_s: f64) -> Vec<Vec<Sample>> {
        ticks_from(source, 1000.0, n, tick_s)
    }

    fn ticks_from<D: DeviceReader>(
        source: &mut LiveSource<D>,
        start: f64,
        n: u32,
        tick_s: f64,
    ) -> Vec<Vec<Sample>> {
        (0..n)
            .map(|i| {
                let t = start + f64::from(i) * tick_s;
                source.sample(|| t)
            })
            .collect()
    }

    #[test]
    fn each_field_is_read_on_its_own_cadence() {
        let mut source = LiveSource::new(
            vec![(0, Scripted::healthy())],
            Cadence::every(Duration::from_millis(100)),
        );
        let samples = ticks(&mut source, 50, 0.1);
        assert!(samples.iter().all(|s| s.len() == 1));
        let reads = &source.slots[0].reader.reads;
        assert_eq!(reads[&Field::Power], 50);
        assert_eq!(reads[&Field::Gpm], 50);
        // 5 s: processes every 1 s, energy every 10 s, limits every 10 s.
        assert_eq!(reads[&Field::Energy], 1);
        assert_eq!(reads[&Field::Processes], 5);
        assert_eq!(reads[&Field::Limits], 1);
        // dcgm-exporter's extras: BAR1, the PCIe link, the fans and each NVLink's state every
        // 10 s (BAR1 costs ~470 µs a read on an H200), never every tick.
        assert_eq!(
            (
                reads[&Field::Bar1],
                reads[&Field::PcieLink],
                reads[&Field::Fan],
                reads[&Field::NvlinkState]
            ),
            (1, 1, 1, 1)
        );
        let with_energy = samples
            .iter()
            .filter(|s| s[0].get(Metric::EnergyMj).is_some())
            .count();
        assert_eq!(with_energy, 1);
        let costs: BTreeMap<Field, FieldCost> = source.field_costs().into_iter().collect();
        assert_eq!(costs[&Field::Power].reads, 50);
        assert_eq!(costs[&Field::Energy].reads, 1);
    }

    #[test]
    fn an_unsupported_field_is_reported_once_and_skipped() {
        let mut gpu = Scripted::healthy();
        gpu.answers.insert(Field::Gpm, Err(ReadError::NotSupported));
        let mut source =
            LiveSource::new(vec![(3, gpu)], Cadence::every(Duration::from_millis(100)));
        let samples = ticks(&mut source, 20, 0.1);
        assert_eq!(source.slots[0].reader.reads[&Field::Gpm], 1);
        assert_eq!(
            source.drain_events(),
            vec![SourceEvent::FieldUnsupported {
                gpu: 3,
                field: Field::Gpm
            }]
        );
        assert!(samples
            .iter()
            .all(|s| s[0].get(Metric::GpmSm).is_none() && s[0].get(Metric::PowerMw).is_some()));
        assert!(source.drain_events().is_empty());
    }

    #[test]
    fn a_board_without_fans_or_nvlink_skips_both_once_and_keeps_its_link_reads() {
        // An SXM H200 in a VM without its NVSwitch fabric: no fan, no NVLink.
        let mut gpu = Scripted::healthy();
        gpu.answers.insert(Field::Fan, Err(ReadError::NotSupported));
        gpu.answers
            .insert(Field::NvlinkState, Err(ReadError::NotSupported));
        let mut source = LiveSource::new(vec![(0, gpu)], Cadence::every(Duration::from_secs(1)));
        ticks(&mut source, 25, 1.0);
        let reads = &source.slots[0].reader.reads;
        assert_eq!((reads[&Field::Fan], reads[&Field::NvlinkState]), (1, 1));
        // At 1 s, BAR1 and the link every 10 s: at 0, 10 and 20 s of 25.
        assert_eq!((reads[&Field::Bar1], reads[&Field::PcieLink]), (3, 3));
        assert_eq!(
            source.drain_events(),
            vec![
                SourceEvent::FieldUnsupported {
                    gpu: 0,
                    field: Field::Fan
                },
                SourceEvent::FieldUnsupported {
                    gpu: 0,
                    field: Field::NvlinkState
                },
            ]
        );
    }

    #[test]
    fn a_failing_field_is_retried_and_reported_without_spam() {
        let mut gpu = Scripted::healthy();
        gpu.answers
            .insert(Field::Energy, Err(ReadError::Failed("Unknown".into())));
        let mut source =
            LiveSource::new(vec![(0, gpu)], Cadence::every(Duration::from_millis(100)));
        ticks(&mut source, 250, 0.1);
        // Retried every tick after a failure, reported on the 1st, 100th and 200th.
        assert_eq!(source.slots[0].reader.reads[&Field::Energy], 250);
        let reported: Vec<u64> = source
            .drain_events()
            .into_iter()
            .filter_map(|e| match e {
                SourceEvent::ReadFailed { times, .. } => Some(times),
                _ => None,
            })
            .collect();
        assert_eq!(reported, vec![1, 100, 200]);
    }

    #[test]
    fn a_lost_gpu_is_reported_and_the_others_go_on() {
        let mut dying = Scripted::healthy();
        dying.lose_after = Some(30);
        let mut source = LiveSource::new(
            vec![(0, Scripted::healthy()), (1, dying)],
            Cadence::every(Duration::from_millis(100)),
        );
        let samples = ticks(&mut source, 20, 0.1);
        assert_eq!(samples[0].len(), 2);
        assert_eq!(samples[19].len(), 1);
        assert_eq!(samples[19][0].gpu, 0);
        assert_eq!(source.live_gpus(), 1);
        let lost: Vec<SourceEvent> = source
            .drain_events()
            .into_iter()
            .filter(|e| matches!(e, SourceEvent::GpuLost { .. }))
            .collect();
        assert_eq!(
            lost,
            vec![SourceEvent::GpuLost {
                gpu: 1,
                error: "fell off the bus".into()
            }]
        );
        let reads_when_lost = source.slots[1].reader.total_reads;
        ticks_from(&mut source, 1002.0, 10, 0.1);
        assert_eq!(
            source.slots[1].reader.total_reads, reads_when_lost,
            "a lost GPU is not read again"
        );
    }

    #[test]
    fn a_lost_gpu_that_answers_again_is_sampled_again() {
        let mut flaky = Scripted::healthy();
        flaky.lose_after = Some(30);
        flaky.back_after = Some(32);
        let mut source = LiveSource::new(
            vec![(0, Scripted::healthy()), (1, flaky)],
            Cadence::every(Duration::from_millis(100)),
        );
        // 30 s at 10 Hz: lost at its 31st read (the third tick), asked again every 10 s: the
        // probe at 10 s (read 32) finds it lost still, the one at 20 s (read 33) finds it back.
        let samples = ticks(&mut source, 300, 0.1);
        let events = source.drain_events();
        assert!(events.contains(&SourceEvent::GpuLost {
            gpu: 1,
            error: "fell off the bus".into()
        }));
        assert!(
            events.contains(&SourceEvent::GpuBack { gpu: 1 }),
            "{events:?}"
        );
        let last = samples.last().expect("ticks");
        assert_eq!(last.len(), 2, "both GPUs sampled at the end");
        let missing = samples.iter().filter(|s| s.len() == 1).count();
        assert!(
            (190..=205).contains(&missing),
            "{missing} ticks without GPU 1"
        );
    }

    #[test]
    fn fields_a_device_does_not_have_are_never_read_nor_reported() {
        let mut instance = Scripted::healthy();
        instance.offers = Some(&[Field::Memory, Field::Processes, Field::Gpm]);
        let mut source = LiveSource::new(
            vec![(0, Scripted::healthy()), (8, instance)],
            Cadence::every(Duration::from_millis(100)),
        );
        let samples = ticks(&mut source, 20, 0.1);
        let reads = &source.slots[1].reader.reads;
        assert_eq!(
            reads.keys().copied().collect::<Vec<_>>(),
            vec![Field::Memory, Field::Processes, Field::Gpm]
        );
        assert_eq!((reads[&Field::Memory], reads[&Field::Gpm]), (20, 20));
        assert_eq!(reads[&Field::Processes], 2, "once a second over 2 s");
        assert!(source.drain_events().is_empty());
        let instance_samples: Vec<&Sample> =
            samples.iter().flatten().filter(|s| s.gpu == 8).collect();
        assert_eq!(instance_samples.len(), 20);
        assert!(instance_samples
            .iter()
            .all(|s| s.get(Metric::PowerMw).is_none() && s.get(Metric::GpmSm).is_some()));
    }

    #[test]
    fn slow_fields_come_after_every_fast_one_for_few_gpus_a_tick() {
        let gpus = (0..4).map(|i| (i, Scripted::healthy())).collect();
        let mut source = LiveSource::new(gpus, Cadence::every(Duration::from_millis(100)));
        ticks(&mut source, 30, 0.1);
        for slot in &source.slots {
            let reader = &slot.reader;
            // Every 10 s beside GPM: once in 3 s.
            assert_eq!(
                reader.reads[&Field::PcieThroughput],
                1,
                "GPU {}",
                slot.index
            );
            // Within a GPU's tick, nothing fast is read after a slow field.
            let mut slow_seen = false;
            for field in &reader.order {
                if field.is_slow() {
                    slow_seen = true;
                } else if *field == Field::Utilization {
                    slow_seen = false;
                } else {
                    assert!(!slow_seen, "{field:?} read after a slow field");
                }
            }
        }
    }

    #[test]
    fn without_gpm_nvml_pcie_is_read_every_second() {
        let gpus = (0..4).map(|i| (i, Scripted::healthy())).collect();
        let mut source = LiveSource::new(gpus, Cadence::every(Duration::from_millis(100)))
            .without(&[Field::Gpm]);
        ticks(&mut source, 30, 0.1);
        for slot in &source.slots {
            // Once a second over 3 s, on 4 GPUs at one GPU a tick.
            assert_eq!(
                slot.reader.reads[&Field::PcieThroughput],
                3,
                "GPU {}",
                slot.index
            );
        }
    }

    #[test]
    fn a_field_left_out_is_never_read_nor_reported() {
        let mut source = LiveSource::new(
            vec![(0, Scripted::healthy())],
            Cadence::every(Duration::from_millis(100)),
        )
        .without(&[Field::Gpm]);
        let samples = ticks(&mut source, 10, 0.1);
        assert!(!source.slots[0].reader.reads.contains_key(&Field::Gpm));
        assert!(source.drain_events().is_empty());
        assert!(samples
            .iter()
            .all(|s| s[0].get(Metric::GpmSm).is_none() && s[0].get(Metric::PowerMw).is_some()));
    }

    #[test]
    fn faults_on_some_gpus_leave_the_others_sampled_and_every_window_accounted() {
        use crate::{Diagnoser, Pipeline};
        let mut slow = Scripted::healthy();
        slow.times_out = Some((Field::Gpm, 3));
        let mut flaky = Scripted::healthy();
        flaky.lose_after = Some(200);
        flaky.back_after = Some(202);
        let mut source = LiveSource::new(
            vec![(0, Scripted::healthy()), (1, slow), (2, flaky)],
            Cadence::every(Duration::from_millis(100)),
        );
        let mut pipeline = Pipeline::new(1.0, Diagnoser::default()).tolerating_clock_steps();
        let mut reports = 0;
        let mut healthy_ticks = 0;
        for i in 0..600u32 {
            // The clock steps back an hour at tick 200 and forward two at tick 400.
            let offset = match i {
                0..200 => 0.0,
                200..400 => -3600.0,
                _ => 3600.0,
            };
            let t = 1_000_000.0 + f64::from(i) * 0.1 + offset;
            let samples = source.sample(|| t);
            healthy_ticks += usize::from(samples.iter().any(|s| s.gpu == 0));
            for s in &samples {
                reports += pipeline
                    .push(s)
                    .expect("a live pipeline takes clock steps")
                    .len();
            }
        }
        reports += pipeline.finish().len();
        assert_eq!(
            healthy_ticks, 600,
            "the healthy GPU is sampled at every tick"
        );
        let events = source.drain_events();
        assert!(
            events.contains(&SourceEvent::GpuBack { gpu: 2 }),
            "{events:?}"
        );
        assert!(events.iter().any(|e| matches!(
            e,
            SourceEvent::ReadFailed {
                gpu: 1,
                field: Field::Gpm,
                ..
            }
        )));
        let counts = pipeline.counts();
        assert_eq!(counts.clock_steps_back, 1);
        assert_eq!(reports as u64, counts.windows, "every window comes out");
        // 60 s of ticks on three GPUs, in three stretches of time: about 60 windows a GPU.
        assert!((160..=190).contains(&reports), "{reports} windows");
    }

    #[test]
    fn a_gpu_without_any_field_yields_no_samples_but_no_panic() {
        let mut source = LiveSource::new(
            vec![(0, Scripted::default())],
            Cadence::every(Duration::from_millis(100)),
        );
        let samples = ticks(&mut source, 3, 0.1);
        assert!(samples.iter().all(Vec::is_empty));
        assert_eq!(source.drain_events().len(), Field::ALL.len());
    }
}
