//! Busy but not fast: every SM holds warps, and no unit is near its peak, because the warps wait
//! on memory latency. Four patterns, and beside three of them their fix, doing the same useful
//! work:
//! - a random 4-byte gather over a table far larger than L2, and the same gather over the
//!   indices sorted;
//! - dependent loads: many independent chains, each load's address the value of the one before
//!   (no fix: the dependence is the program's; more chains per thread would be);
//! - a random `atomicAdd` scatter into 8192 bins, and the same with a shared-memory
//!   pre-reduction per block;
//! - a streaming copy on an under-filled grid (a quarter as many blocks as SMs, each of 1024
//!   threads: every block efficient, most SMs empty), and at full width.
//!
//! Each figure is the DRAM traffic's share of the DRAM peak (`Options::dram_peak_gb_s`, the
//! spec table's), counting whole 64-byte DRAM fetches; the useful bytes' rate and share are beside
//! it (see `accounting::Traffic`).

use std::time::Duration;

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::config;
use crate::accounting::{
    chase_traffic, copy_traffic, distinct_fetches, gather_traffic, rate, scatter_traffic,
    share_of_peak_pct, Traffic,
};
use crate::reference::{
    chase_end, gather_value, random_unit, relative_error, scatter_histogram, splitmix64,
    SCATTER_BINS,
};
use crate::{verify, BenchError, Gpu, Measurement, Options, Recorder};

/// The table is at least this many times the L2: a repeat access is almost never still cached.
const TABLE_OVER_L2: u64 = 64;
/// Below this many times the L2 the table is refused: hits would flatter the figures.
const MIN_TABLE_OVER_L2: u64 = 16;
/// u32 indices; 8 GiB of f32, beyond any L2 for years.
const MAX_TABLE_LEN: u64 = 1 << 31;
/// Gathers per launch: one per 16 table elements (one per 64-byte block on average), at most 2^28.
const GATHER_PER_TABLE: u64 = 16;
const MAX_GATHER_N: u64 = 1 << 28;
/// Blocks of 256 chains per SM: one, so that every SM holds warps while the loads in flight
/// (a fetch per chain) stay well under what DRAM could serve: the chase measures latency, not
/// the random-access bandwidth the gather already reaches.
const CHASE_BLOCKS_PER_SM: u32 = 1;
/// Dependent loads per chain per launch.
const CHASE_STEPS: i32 = 1024;
const MAX_SCATTER_N: u64 = 1 << 27;
/// Blocks per SM of the scatter kernels.
const SCATTER_BLOCKS_PER_SM: u32 = 4;
/// 16-byte elements per copied array: 1 GiB.
const MAX_COPY_N2: u64 = 1 << 26;
const THREADS: u32 = 256;
/// Threads per block of the under-filled grid: full blocks, so that only their number is wrong.
const NARROW_THREADS: u32 = 1024;
/// Launches per variant when no duration is set: enough for a stable rate.
const REPS: u64 = 20;
const SEED_TABLE: u64 = 71;
const SEED_INDEX: u64 = 72;
const SEED_CHAINS: u64 = 73;
const SEED_ITEMS: u64 = 74;
const SEED_COPY: u64 = 75;
/// Gathered values checked per variant.
const CHECKED: u64 = 4096;
/// Doubles checked at each end of the copy.
const CHECK_SPAN: usize = 1 << 20;

/// How large each part is on this GPU: pure, so that CI checks it for the GPUs we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// Elements (4-byte) of the gather table and of the chase table: a power of two.
    pub table_len: u64,
    /// Gathered values per launch.
    pub gather_n: u64,
    /// Independent chains of the chase (one per thread).
    pub chains: u64,
    pub scatter_n: u64,
    pub scatter_blocks: u32,
    /// 16-byte elements per copied array.
    pub copy_n2: u64,
    /// The under-filled grid: a quarter as many blocks as SMs, of `NARROW_THREADS` each.
    pub narrow_blocks: u32,
    /// The fix: one block per 256 elements, every SM full.
    pub full_blocks: u32,
}

impl Sizes {
    /// Sizes for a GPU with `sms` SMs, an L2 of `l2_bytes` and `free_bytes` of free memory. Any
    /// one part uses at most a quarter of the free memory (the GPU may be shared); a table that
    /// cannot be 16× the L2 within it is refused.
    pub fn for_device(l2_bytes: u64, free_bytes: u64, sms: u32) -> Result<Sizes, String> {
        let l2 = l2_bytes.max(1 << 20);
        let budget = free_bytes / 4;
        let want = (TABLE_OVER_L2 * l2 / 4)
            .next_power_of_two()
            .min(MAX_TABLE_LEN);
        let fits = if budget >= 4 {
            1u64 << (budget / 4).ilog2()
        } else {
            0
        };
        let table_len = want.min(fits);
        if table_len * 4 < MIN_TABLE_OVER_L2 * l2 {
            return Err(format!(
                "a table {MIN_TABLE_OVER_L2}× the L2 ({} MiB) does not fit a quarter of the free memory ({} MiB) or u32 indices ({} MiB)",
                (MIN_TABLE_OVER_L2 * l2) >> 20,
                free_bytes >> 20,
                (MAX_TABLE_LEN * 4) >> 20
            ));
        }
        let sms = sms.max(1);
        Ok(Sizes {
            table_len,
            gather_n: (table_len / GATHER_PER_TABLE).min(MAX_GATHER_N),
            chains: u64::from(sms * CHASE_BLOCKS_PER_SM * THREADS),
            // Items and copies in the same budget: two copied arrays, one item array.
            scatter_n: (budget / 4).clamp(1 << 20, MAX_SCATTER_N),
            scatter_blocks: sms * SCATTER_BLOCKS_PER_SM,
            copy_n2: (budget / 2 / 16).clamp(1 << 20, MAX_COPY_N2),
            narrow_blocks: (sms / 4).max(1),
            full_blocks: 0,
        }
        .with_full_blocks())
    }

    fn with_full_blocks(mut self) -> Sizes {
        self.full_blocks = self.copy_n2.div_ceil(u64::from(THREADS)) as u32;
        self
    }

    fn gather_blocks(&self) -> u32 {
        self.gather_n.div_ceil(u64::from(THREADS)) as u32
    }
}

/// What one variant's timed launches did.
struct Timed {
    launches: u64,
    seconds: f64,
}

/// Launches `launch` once to warm up, once to measure, then as many times as the options ask,
/// inside the recorder's span.
fn timed(
    gpu: &Gpu,
    options: &Options,
    rec: &mut Recorder,
    mut launch: impl FnMut() -> Result<(), BenchError>,
) -> Result<Timed, BenchError> {
    launch()?;
    let one_ms = gpu.time_ms(&mut launch)?;
    let launches = options.reps_for(REPS, Duration::from_secs_f64(one_ms / 1e3));
    rec.restart();
    let ms = gpu.time_ms(|| (0..launches).try_for_each(|_| launch()))?;
    rec.stop();
    Ok(Timed {
        launches,
        seconds: ms / 1e3,
    })
}

/// The figures of one variant: its DRAM traffic's share of the peak as the headline (GB/s where
/// no peak is known), useful and DRAM rates beside it.
fn figures(
    options: &Options,
    traffic: Traffic,
    t: &Timed,
) -> (f64, &'static str, Vec<(&'static str, f64)>) {
    let useful = traffic.useful_bytes as f64 * t.launches as f64;
    let dram = traffic.dram_bytes as f64 * t.launches as f64;
    let mut details = vec![
        ("useful_gb_s", rate(useful, t.seconds, 1e9)),
        ("dram_gb_s", rate(dram, t.seconds, 1e9)),
        ("useful_bytes_per_launch", traffic.useful_bytes as f64),
        ("dram_bytes_per_launch", traffic.dram_bytes as f64),
        ("ms_per_launch", t.seconds * 1e3 / t.launches as f64),
        ("launches", t.launches as f64),
    ];
    match options.dram_peak_gb_s.filter(|p| *p > 0.0) {
        Some(peak) => {
            let dram_pct = share_of_peak_pct(dram, t.seconds, peak);
            details.push(("peak_gb_s", peak));
            details.push((
                "useful_pct_of_peak",
                share_of_peak_pct(useful, t.seconds, peak),
            ));
            details.push(("dram_pct_of_peak", dram_pct));
            (dram_pct, "% DRAM peak", details)
        }
        None => (rate(dram, t.seconds, 1e9), "GB/s DRAM", details),
    }
}

pub fn run(gpu: &Gpu, options: &Options) -> Result<Vec<Measurement>, BenchError> {
    let (free_bytes, _) = gpu.ctx.mem_get_info()?;
    let sizes = Sizes::for_device(gpu.l2_bytes, free_bytes as u64, gpu.sms).map_err(|detail| {
        BenchError::Unsupported {
            workload: "latency",
            detail,
        }
    })?;
    let mut out = gather(gpu, options, &sizes)?;
    out.extend(chase(gpu, options, &sizes)?);
    out.extend(scatter(gpu, options, &sizes)?);
    out.extend(copy(gpu, options, &sizes)?);
    Ok(out)
}

fn fill_blocks(gpu: &Gpu) -> u32 {
    gpu.sms * 16
}

fn gather(gpu: &Gpu, options: &Options, sizes: &Sizes) -> Result<Vec<Measurement>, BenchError> {
    let init = gpu.function("latency_init_table")?;
    let table_len = sizes.table_len as i64;
    // SAFETY: every element is written by latency_init_table before it is read.
    let mut table = unsafe { gpu.stream.alloc::<f32>(sizes.table_len as usize)? };
    let mut builder = gpu.stream.launch_builder(&init);
    builder.arg(&mut table).arg(&table_len).arg(&SEED_TABLE);
    // SAFETY: latency_init_table(float*, long, unsigned long long) over table_len floats.
    unsafe { builder.launch(config(fill_blocks(gpu), THREADS)) }?;

    let n = sizes.gather_n as usize;
    let mask = sizes.table_len - 1;
    let mut indices: Vec<u32> = (0..n as u64)
        .map(|i| (splitmix64(SEED_INDEX ^ i.wrapping_mul(0x9E37_79B9)) & mask) as u32)
        .collect();
    let mut out = Vec::new();
    let mut ms_random = None;
    for (variant, kernel) in [
        ("gather_random", "latency_gather"),
        ("gather_sorted", "latency_gather_sorted"),
    ] {
        let sorted = kernel == "latency_gather_sorted";
        if sorted {
            indices.sort_unstable();
        }
        let f = gpu.function(kernel)?;
        let idx = gpu.stream.clone_htod(&indices)?;
        // Zeroed: memory the pool hands back may hold the other variant's gathered values.
        let mut got = gpu.stream.alloc_zeros::<f32>(n)?;
        let count = n as i64;
        let mut launch = || -> Result<(), BenchError> {
            let mut builder = gpu.stream.launch_builder(&f);
            builder.arg(&table).arg(&idx).arg(&mut got).arg(&count);
            // SAFETY: latency_gather(const float*, const unsigned*, float*, long): idx and got
            // hold n elements, every index is below table_len.
            unsafe { builder.launch(config(sizes.gather_blocks(), THREADS)) }?;
            Ok(())
        };
        let mut rec = Recorder::start("latency", gpu.ordinal);
        let t = timed(gpu, options, &mut rec, &mut launch)?;
        let host = gpu.stream.clone_dtoh(&got)?;
        let worst = (0..CHECKED)
            .map(|k| (splitmix64(k) % n as u64) as usize)
            .map(|i| {
                relative_error(
                    f64::from(host[i]),
                    f64::from(gather_value(SEED_TABLE, u64::from(indices[i]))),
                    1.0,
                )
            })
            .fold(0.0, f64::max);
        let check = verify("latency", "gathered values", worst, 0.0, CHECKED as usize)?;
        let sectors = sorted.then(|| distinct_fetches(&indices));
        let (value, unit, mut details) = figures(options, gather_traffic(n as u64, sectors), &t);
        details.push(("table_bytes", (sizes.table_len * 4) as f64));
        details.push((
            "table_over_l2",
            (sizes.table_len * 4) as f64 / gpu.l2_bytes.max(1) as f64,
        ));
        details.push(("gathers_per_launch", n as f64));
        let ms = t.seconds / t.launches as f64;
        match ms_random {
            None => ms_random = Some(ms),
            Some(slow) => details.push(("speedup_x", slow / ms)),
        }
        out.push(rec.measure(variant, value, unit, &details, check));
    }
    Ok(out)
}

fn chase(gpu: &Gpu, options: &Options, sizes: &Sizes) -> Result<Vec<Measurement>, BenchError> {
    let init = gpu.function("latency_init_chase")?;
    let f = gpu.function("latency_chase")?;
    let table_len = sizes.table_len as i64;
    let mask = sizes.table_len - 1;
    // SAFETY: every element is written by latency_init_chase before it is read.
    let mut next = unsafe { gpu.stream.alloc::<u32>(sizes.table_len as usize)? };
    let mut builder = gpu.stream.launch_builder(&init);
    builder.arg(&mut next).arg(&table_len).arg(&mask);
    // SAFETY: latency_init_chase(unsigned*, long, unsigned long long) over table_len elements.
    unsafe { builder.launch(config(fill_blocks(gpu), THREADS)) }?;
    let starts: Vec<u32> = (0..sizes.chains)
        .map(|c| (splitmix64(SEED_CHAINS ^ c) & mask) as u32)
        .collect();
    let mut pos = gpu.stream.clone_htod(&starts)?;
    let blocks = (sizes.chains / u64::from(THREADS)) as u32;
    let mut launches = 0u64;
    let mut launch = || -> Result<(), BenchError> {
        let mut builder = gpu.stream.launch_builder(&f);
        builder.arg(&next).arg(&mut pos).arg(&CHASE_STEPS);
        // SAFETY: latency_chase(const unsigned*, unsigned*, int): one position per thread,
        // blocks × THREADS = chains; every position and value of next is below table_len.
        unsafe { builder.launch(config(blocks, THREADS)) }?;
        launches += 1;
        Ok(())
    };
    let mut rec = Recorder::start("latency", gpu.ordinal);
    let t = timed(gpu, options, &mut rec, &mut launch)?;
    let host = gpu.stream.clone_dtoh(&pos)?;
    let steps = launches * CHASE_STEPS as u64;
    // A few chains replayed on the CPU: each step is one multiply-add.
    let checked = 16.min(sizes.chains);
    let worst = (0..checked)
        .map(|k| (splitmix64(k) % sizes.chains) as usize)
        .map(|c| {
            relative_error(
                f64::from(host[c]),
                f64::from(chase_end(starts[c], steps, mask)),
                1.0,
            )
        })
        .fold(0.0, f64::max);
    let check = verify(
        "latency",
        "chain ends after every load",
        worst,
        0.0,
        checked as usize,
    )?;
    let traffic = chase_traffic(sizes.chains, CHASE_STEPS as u64);
    let (value, unit, mut details) = figures(options, traffic, &t);
    let seconds_per_launch = t.seconds / t.launches as f64;
    details.push(("chains", sizes.chains as f64));
    details.push(("steps_per_launch", f64::from(CHASE_STEPS)));
    details.push((
        "ns_per_dependent_load",
        seconds_per_launch * 1e9 / f64::from(CHASE_STEPS),
    ));
    details.push(("table_bytes", (sizes.table_len * 4) as f64));
    Ok(vec![rec.measure("chase", value, unit, &details, check)])
}

fn scatter(gpu: &Gpu, options: &Options, sizes: &Sizes) -> Result<Vec<Measurement>, BenchError> {
    let init = gpu.function("latency_init_items")?;
    let n = sizes.scatter_n as i64;
    // SAFETY: every element is written by latency_init_items before it is read.
    let mut items = unsafe { gpu.stream.alloc::<u32>(sizes.scatter_n as usize)? };
    let mut builder = gpu.stream.launch_builder(&init);
    builder.arg(&mut items).arg(&n).arg(&SEED_ITEMS);
    // SAFETY: latency_init_items(unsigned*, long, unsigned long long) over n elements.
    unsafe { builder.launch(config(fill_blocks(gpu), THREADS)) }?;
    let want_once = scatter_histogram(SEED_ITEMS, sizes.scatter_n);
    let mut out = Vec::new();
    let mut ms_atomic = None;
    for (variant, kernel) in [
        ("scatter_atomic", "latency_scatter"),
        ("scatter_smem", "latency_scatter_smem"),
    ] {
        let f = gpu.function(kernel)?;
        let mut bins = gpu.stream.alloc_zeros::<u32>(SCATTER_BINS)?;
        let mut launches = 0u64;
        let mut launch = |bins: &mut CudaSlice<u32>| -> Result<(), BenchError> {
            let mut builder = gpu.stream.launch_builder(&f);
            builder.arg(&items).arg(bins).arg(&n);
            // SAFETY: latency_scatter(_smem)(const unsigned*, unsigned*, long): n items, bins of
            // SCATTER_BINS counters indexed by the item's low 13 bits.
            unsafe { builder.launch(config(sizes.scatter_blocks, THREADS)) }?;
            launches += 1;
            Ok(())
        };
        let mut rec = Recorder::start("latency", gpu.ordinal);
        let t = timed(gpu, options, &mut rec, || launch(&mut bins))?;
        let got = gpu.stream.clone_dtoh(&bins)?;
        // Integer sums: exact, whatever order the atomics ran in (wrapping, as on the GPU).
        let times = launches as u32;
        let worst = got
            .iter()
            .zip(&want_once)
            .map(|(g, w)| relative_error(f64::from(*g), f64::from(w.wrapping_mul(times)), 1.0))
            .fold(0.0, f64::max);
        let check = verify(
            "latency",
            "every bin after every scatter",
            worst,
            0.0,
            SCATTER_BINS,
        )?;
        let (value, unit, mut details) = figures(
            options,
            scatter_traffic(sizes.scatter_n, SCATTER_BINS as u64),
            &t,
        );
        let seconds_per_launch = t.seconds / t.launches as f64;
        details.push(("items_per_launch", sizes.scatter_n as f64));
        details.push((
            "g_items_per_s",
            sizes.scatter_n as f64 / seconds_per_launch / 1e9,
        ));
        details.push(("bins", SCATTER_BINS as f64));
        match ms_atomic {
            None => ms_atomic = Some(seconds_per_launch),
            Some(slow) => details.push(("speedup_x", slow / seconds_per_launch)),
        }
        out.push(rec.measure(variant, value, unit, &details, check));
    }
    Ok(out)
}

fn copy(gpu: &Gpu, options: &Options, sizes: &Sizes) -> Result<Vec<Measurement>, BenchError> {
    let init = gpu.function("init_random")?;
    let len = (sizes.copy_n2 * 2) as usize;
    let doubles = len as i64;
    let n2 = sizes.copy_n2 as i64;
    // SAFETY: a is written by init_random before it is read; c is zeroed before each variant.
    let mut a = unsafe { gpu.stream.alloc::<f64>(len)? };
    let mut c = unsafe { gpu.stream.alloc::<f64>(len)? };
    let mut builder = gpu.stream.launch_builder(&init);
    builder.arg(&mut a).arg(&doubles).arg(&SEED_COPY);
    // SAFETY: init_random(double*, long, unsigned long long) over len doubles.
    unsafe { builder.launch(config(fill_blocks(gpu), THREADS)) }?;
    let mut out = Vec::new();
    let mut ms_narrow = None;
    for (variant, kernel, blocks, threads) in [
        (
            "copy_narrow_grid",
            "latency_copy_narrow",
            sizes.narrow_blocks,
            NARROW_THREADS,
        ),
        (
            "copy_full_grid",
            "latency_copy_full",
            sizes.full_blocks,
            THREADS,
        ),
    ] {
        let f = gpu.function(kernel)?;
        // Cleared, so that the check sees this variant's copy, not the one before.
        gpu.stream.memset_zeros(&mut c)?;
        let mut launch = || -> Result<(), BenchError> {
            let mut builder = gpu.stream.launch_builder(&f);
            builder.arg(&a).arg(&mut c).arg(&n2);
            // SAFETY: latency_copy_*(const double2*, double2*, long): a and c hold n2 double2
            // (len doubles); the grid-stride loop covers them with any grid.
            unsafe { builder.launch(config(blocks, threads)) }?;
            Ok(())
        };
        let mut rec = Recorder::start("latency", gpu.ordinal);
        let t = timed(gpu, options, &mut rec, &mut launch)?;
        // The first and last CHECK_SPAN doubles of the copy, against their random starts.
        let span = CHECK_SPAN.min(len);
        let mut worst: f64 = 0.0;
        for first in [0, len - span] {
            let mut host = vec![0.0f64; span];
            gpu.stream
                .memcpy_dtoh(&c.slice(first..first + span), &mut host)?;
            gpu.stream.synchronize()?;
            for (k, got) in host.iter().enumerate() {
                let want = random_unit(SEED_COPY, (first + k) as u64);
                worst = worst.max(relative_error(*got, want, 1e-300));
            }
        }
        let check = verify("latency", "copied values", worst, 0.0, 2 * span)?;
        let (value, unit, mut details) = figures(options, copy_traffic(sizes.copy_n2), &t);
        details.push(("blocks", f64::from(blocks)));
        details.push(("threads_per_block", f64::from(threads)));
        details.push(("sms", f64::from(gpu.sms)));
        let seconds_per_launch = t.seconds / t.launches as f64;
        match ms_narrow {
            None => ms_narrow = Some(seconds_per_launch),
            Some(slow) => details.push(("speedup_x", slow / seconds_per_launch)),
        }
        out.push(rec.measure(variant, value, unit, &details, check));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn an_h100_gets_a_table_64_times_its_l2_and_every_sm_busy() {
        // H100 SXM: 50 MiB L2, 80 GB, 132 SMs.
        let s = Sizes::for_device(50 * MIB, 79 * GIB, 132).expect("fits");
        assert_eq!(s.table_len, 1 << 30, "4 GiB of f32: 82× the L2");
        assert!(s.table_len * 4 >= TABLE_OVER_L2 * 50 * MIB);
        assert_eq!(s.gather_n, 1 << 26);
        assert_eq!(s.chains, 132 * 256, "one block of 256 chains per SM");
        assert_eq!(s.scatter_blocks, 528);
        assert_eq!(s.scatter_n, MAX_SCATTER_N);
        assert_eq!(s.copy_n2, MAX_COPY_N2);
        assert_eq!(s.narrow_blocks, 33, "fewer blocks than SMs");
        assert_eq!(u64::from(s.full_blocks) * 256, s.copy_n2);
        assert!(u64::from(s.gather_blocks()) * 256 >= s.gather_n);
    }

    #[test]
    fn larger_l2s_get_larger_tables_up_to_u32_indices() {
        // H200: 60 MiB L2 → 3.75 GiB wanted → 4 GiB.
        let h200 = Sizes::for_device(60 * MIB, 140 * GIB, 132).expect("fits");
        assert_eq!(h200.table_len, 1 << 30);
        // B200: 126 MiB L2 → 7.9 GiB wanted → 8 GiB, the u32 limit.
        let b200 = Sizes::for_device(126 * MIB, 180 * GIB, 148).expect("fits");
        assert_eq!(b200.table_len, MAX_TABLE_LEN);
        assert_eq!(b200.gather_n, 1 << 27);
        // A future 256 MiB L2 still stops at u32 indices (32× the L2), the gathers at 2^28.
        let big = Sizes::for_device(256 * MIB, 1024 * GIB, 200).expect("fits");
        assert_eq!(big.table_len, MAX_TABLE_LEN);
        assert!(big.gather_n <= MAX_GATHER_N);
        // A 1 GiB L2 cannot get a table 16× its size with u32 indices: refused.
        assert!(Sizes::for_device(GIB, 1024 * GIB, 200).is_err());
    }

    #[test]
    fn a_small_card_shrinks_the_table_within_a_quarter_of_free_memory_or_refuses() {
        // A 24 GB card with 6 MiB L2: 384 MiB wanted, 6 GiB budget.
        let l4 = Sizes::for_device(48 * MIB, 22 * GIB, 58).expect("fits");
        assert_eq!(l4.table_len * 4, 4 * GIB, "64 × 48 MiB = 3 GiB → 4 GiB");
        // Little free memory: the table is the largest power of two in a quarter of it.
        let tight = Sizes::for_device(50 * MIB, 8 * GIB, 132).expect("fits");
        assert_eq!(tight.table_len * 4, 2 * GIB);
        assert!(tight.table_len * 4 <= 8 * GIB / 4);
        assert!(tight.copy_n2 * 16 * 2 <= 8 * GIB / 4);
        // Not even 16× the L2 fits: refused, with the sizes in the message.
        let err = Sizes::for_device(50 * MIB, 2 * GIB, 132).expect_err("too small");
        assert!(err.contains("800 MiB") && err.contains("2048 MiB"), "{err}");
        // Fewer SMs than four: still one block for the narrow grid.
        assert_eq!(
            Sizes::for_device(MIB, 8 * GIB, 2).map(|s| s.narrow_blocks),
            Ok(1)
        );
    }
}
