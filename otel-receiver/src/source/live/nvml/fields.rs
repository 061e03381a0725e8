//! How each [`Field`] is read from NVML: the reads, the field ids, NVML's errors turned into
//! the sampler's three kinds (not supported, GPU lost, failed), the per-process SM shares.

use super::*;

/// NVML field ids (nvml.h): instantaneous and averaged power, in mW.
const FI_DEV_POWER_AVERAGE: u32 = 185;
const FI_DEV_POWER_INSTANT: u32 = 186;
/// NVLink data sent and received since the driver loaded, KiB, summed over the GPU's links.
const FI_DEV_NVLINK_THROUGHPUT_DATA_TX: u32 = 138;
const FI_DEV_NVLINK_THROUGHPUT_DATA_RX: u32 = 139;

/// HBM temperature (°C), and NVLink errors since the driver loaded, summed over links.
const FI_DEV_MEMORY_TEMP: u32 = 82;
const FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: u32 = 45;
const FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: u32 = 52;
const FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: u32 = 59;

const KIB: f64 = 1024.0;

/// NVML_NVLINK_MAX_LINKS (nvml.h): 18 on Hopper, the most any GPU has.
const NVLINK_MAX_LINKS: u32 = 18;

/// How often NVML's per-process SM shares are asked for. The process list is read every
/// second, but the shares cost 2.4–2.6 ms of CPU a read on an H200 (0.26% of a core a GPU at
/// 1 s, more than the rest of the agent together); every 5 s, averaged over every sample
/// the driver took since, they cost a fifth of that and say more than the newest sample.
const PROCESS_SHARES_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// Each process's SM share (%), averaged over the samples of the last read.
#[derive(Default)]
pub(super) struct ProcessShares {
    /// The newest sample seen (µs), so that each read asks only for newer ones.
    seen_us: Option<u64>,
    read_at: Option<std::time::Instant>,
    sm_pct: std::collections::HashMap<u32, f64>,
}

pub(super) fn classify(e: NvmlError) -> ReadError {
    match e {
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => ReadError::NotSupported,
        NvmlError::GpuLost => ReadError::GpuLost(e.to_string()),
        other => ReadError::Failed(other.to_string()),
    }
}

fn sample_value(v: &SampleValue) -> f64 {
    match *v {
        SampleValue::F64(v) => v,
        SampleValue::U32(v) => f64::from(v),
        SampleValue::U64(v) => v as f64,
        SampleValue::I64(v) => v as f64,
    }
}

impl DeviceReader for NvmlDevice {
    fn facts(&mut self) -> DeviceFacts {
        let d = &self.device;
        if let Scope::MigInstance { parent_index, .. } = &self.scope {
            return DeviceFacts {
                name: d.name().ok(),
                uuid: d.uuid().ok(),
                driver: self.driver.clone(),
                mem_total_bytes: d.memory_info().ok().map(|m| m.total as f64),
                mig_parent: Some(*parent_index),
                // The instance's own SMs; the rest of its make-up is its GPU's.
                figures: LiveFigures {
                    sm_count: d.attributes().ok().map(|a| a.multiprocessor_count),
                    ..LiveFigures::default()
                },
                ..DeviceFacts::default()
            };
        }
        let limit_range_w = d.power_management_limit_constraints().ok().map(|c| {
            (
                f64::from(c.min_limit) / 1000.0,
                f64::from(c.max_limit) / 1000.0,
            )
        });
        DeviceFacts {
            name: d.name().ok(),
            uuid: d.uuid().ok(),
            driver: self.driver.clone(),
            tdp_w: d
                .power_management_limit_default()
                .ok()
                .map(|mw| f64::from(mw) / 1000.0),
            power_limit_w: d
                .enforced_power_limit()
                .ok()
                .map(|mw| f64::from(mw) / 1000.0),
            power_limit_min_w: limit_range_w.map(|(min, _)| min),
            power_limit_max_w: limit_range_w.map(|(_, max)| max),
            temp_slowdown_c: d
                .temperature_threshold(TemperatureThreshold::Slowdown)
                .ok()
                .map(f64::from),
            mem_total_bytes: d.memory_info().ok().map(|m| m.total as f64),
            minor_number: d.minor_number().ok(),
            mig_parent: None,
            pci_bus_id: d.pci_info().ok().map(|p| p.bus_id),
            serial: d.serial().ok(),
            vbios: d.vbios_version().ok(),
            figures: live_figures(d),
            spec: None,
        }
    }

    fn fields(&self) -> &'static [Field] {
        match self.scope {
            Scope::Gpu => &Field::ALL,
            Scope::MigInstance { .. } => &MIG_INSTANCE_FIELDS,
        }
    }

    fn read(&mut self, field: Field, s: &mut Sample) -> Result<(), ReadError> {
        let d = &self.device;
        match field {
            Field::Utilization => {
                let u = d.utilization_rates().map_err(classify)?;
                s.set(Metric::UtilGpu, f64::from(u.gpu));
                s.set(Metric::UtilMem, f64::from(u.memory));
            }
            Field::Power => s.set(
                Metric::PowerMw,
                f64::from(d.power_usage().map_err(classify)?),
            ),
            Field::PowerFields => {
                let ids = [FieldId(FI_DEV_POWER_INSTANT), FieldId(FI_DEV_POWER_AVERAGE)];
                let values = d.field_values_for(&ids).map_err(classify)?;
                let mut any = false;
                for (value, metric) in values.iter().zip([Metric::PowerInstMw, Metric::PowerAvgMw])
                {
                    if let Ok(sample) = value {
                        if let Ok(v) = &sample.value {
                            s.set(metric, sample_value(v));
                            any = true;
                        }
                    }
                }
                if !any {
                    return Err(ReadError::NotSupported);
                }
            }
            Field::Energy => s.set(
                Metric::EnergyMj,
                d.total_energy_consumption().map_err(classify)? as f64,
            ),
            Field::Clocks => {
                s.set(
                    Metric::SmMhz,
                    f64::from(d.clock_info(Clock::SM).map_err(classify)?),
                );
                if let Ok(mhz) = d.clock_info(Clock::Memory) {
                    s.set(Metric::MemMhz, f64::from(mhz));
                }
            }
            Field::Temperature => s.set(
                Metric::TempC,
                f64::from(d.temperature(TemperatureSensor::Gpu).map_err(classify)?),
            ),
            Field::PerformanceState => {
                let state = d.performance_state().map_err(classify)?;
                let index = state.as_c();
                // NVML_PSTATE_UNKNOWN is 32: not a state to report.
                if index > 15 {
                    return Err(ReadError::Failed("performance state unknown".into()));
                }
                s.set(Metric::Pstate, f64::from(index));
            }
            Field::ClockReasons => {
                s.clk_reasons = Some(d.current_throttle_reasons().map_err(classify)?.bits());
            }
            Field::Memory => {
                let (used, total) = match self.hot.memory_info_v1 {
                    Some(get) => {
                        let mut m = nvmlMemory_t {
                            total: 0,
                            free: 0,
                            used: 0,
                        };
                        // SAFETY: a valid device handle and a struct of the v1 layout.
                        nvml_try(unsafe { get(d.handle(), &mut m) }).map_err(classify)?;
                        (m.used, m.total)
                    }
                    None => {
                        let m = d.memory_info().map_err(classify)?;
                        (m.used, m.total)
                    }
                };
                s.set(Metric::MemUsedBytes, used as f64);
                s.set(Metric::MemTotalBytes, total as f64);
            }
            Field::Processes => self.read_processes(s)?,
            Field::Limits => {
                let enforced = d.enforced_power_limit().map_err(classify)?;
                s.set(Metric::PowerLimitMw, f64::from(enforced));
                if let Ok(default) = d.power_management_limit_default() {
                    s.set(Metric::PowerDefaultLimitMw, f64::from(default));
                }
                if let Ok(c) = d.temperature_threshold(TemperatureThreshold::Slowdown) {
                    s.set(Metric::TempSlowdownC, f64::from(c));
                }
            }
            Field::Gpm => self.read_gpm(s)?,
            Field::NvlinkThroughput => self.read_nvlink(s)?,
            Field::PcieThroughput => {
                // KB/s, as NVML counts them (1024 bytes); each call waits ~20 ms to measure.
                let tx = d.pcie_throughput(PcieUtilCounter::Send).map_err(classify)?;
                let rx = d
                    .pcie_throughput(PcieUtilCounter::Receive)
                    .map_err(classify)?;
                s.set(Metric::NvmlPcieTx, f64::from(tx) / KIB);
                s.set(Metric::NvmlPcieRx, f64::from(rx) / KIB);
            }
            Field::MemoryTemperature => {
                let values = d
                    .field_values_for(&[FieldId(FI_DEV_MEMORY_TEMP)])
                    .map_err(classify)?;
                let value = values
                    .into_iter()
                    .next()
                    .ok_or(ReadError::NotSupported)?
                    .map_err(classify)?
                    .value
                    .map_err(classify)?;
                s.set(Metric::MemTempC, sample_value(&value));
            }
            Field::Codec => {
                let enc = d.encoder_utilization().map_err(classify)?;
                s.set(Metric::UtilEnc, f64::from(enc.utilization));
                if let Ok(dec) = d.decoder_utilization() {
                    s.set(Metric::UtilDec, f64::from(dec.utilization));
                }
            }
            Field::Health => self.read_health(s)?,
            Field::Bar1 => {
                let bar1 = d.bar1_memory_info().map_err(classify)?;
                s.set(Metric::Bar1UsedBytes, bar1.used as f64);
                s.set(Metric::Bar1TotalBytes, bar1.total as f64);
            }
            Field::PcieLink => {
                s.set(
                    Metric::PcieLinkGen,
                    f64::from(d.current_pcie_link_gen().map_err(classify)?),
                );
                s.set(
                    Metric::PcieLinkWidth,
                    f64::from(d.current_pcie_link_width().map_err(classify)?),
                );
                // The most this GPU *in this system* trains to (nvml.h: "possible with this
                // device and system"): a Gen5 board in a Gen4 slot reads 4, not 5.
                if let Ok(gen) = d.max_pcie_link_gen() {
                    s.set(Metric::PcieLinkGenMax, f64::from(gen));
                }
                if let Ok(width) = d.max_pcie_link_width() {
                    s.set(Metric::PcieLinkWidthMax, f64::from(width));
                }
            }
            Field::Fan => {
                let fans = d.num_fans().map_err(classify)?;
                if fans == 0 {
                    return Err(ReadError::NotSupported);
                }
                let mut sum = 0.0;
                for fan in 0..fans {
                    sum += f64::from(d.fan_speed(fan).map_err(classify)?);
                }
                s.set(Metric::FanPct, sum / f64::from(fans));
            }
            Field::NvlinkState => self.read_nvlink_state(s)?,
            Field::Xid => {
                let xid = self.xid.as_ref().ok_or(ReadError::NotSupported)?;
                let index = d.index().map_err(classify)?;
                let (n, last) = xid
                    .counts
                    .get(index as usize)
                    .ok_or(ReadError::NotSupported)?;
                s.set(Metric::XidEvents, n.load(Ordering::Relaxed) as f64);
                s.set(Metric::XidLast, last.load(Ordering::Relaxed) as f64);
            }
        }
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("gpm_unrefreshed_pairs", self.gpm_unrefreshed)]
    }
}

impl NvmlDevice {
    /// The processes holding the GPU: PID and GPU memory, and each one's share of SM time,
    /// asked for every `PROCESS_SHARES_PERIOD` while any process runs.
    fn read_processes(&mut self, s: &mut Sample) -> Result<(), ReadError> {
        let running = self.device.running_compute_processes().map_err(classify)?;
        let due = self
            .process_shares
            .read_at
            .is_none_or(|at| at.elapsed() >= PROCESS_SHARES_PERIOD);
        if due && !running.is_empty() {
            self.read_process_shares()?;
        }
        s.set(Metric::Nprocs, running.len() as f64);
        let shares = &self.process_shares.sm_pct;
        let processes = running
            .iter()
            .map(|p| crate::attribution::GpuProcess {
                pid: p.pid,
                gpu_mem_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes as f64),
                    UsedGpuMemory::Unavailable => None,
                },
                sm_pct: shares.get(&p.pid).copied(),
                ..Default::default()
            })
            .collect();
        s.processes = Some(std::sync::Arc::new(processes));
        Ok(())
    }

    /// Asks for every per-process sample newer than the last read
    /// (`nvmlDeviceGetProcessUtilization`, which answers NotFound when no process has any) and
    /// averages each process's; a process with no new samples has no share until the next.
    fn read_process_shares(&mut self) -> Result<(), ReadError> {
        let shares = &mut self.process_shares;
        shares.read_at = Some(std::time::Instant::now());
        let samples = match self.device.process_utilization_stats(shares.seen_us) {
            Ok(samples) => samples,
            Err(NvmlError::GpuLost) => return Err(ReadError::GpuLost("GPU lost".into())),
            // NotFound (no process has samples), NotSupported: no shares this time.
            Err(_) => Vec::new(),
        };
        if let Some(newest) = samples.iter().map(|u| u.timestamp).max() {
            shares.seen_us = Some(newest);
        }
        let mut sums: std::collections::HashMap<u32, (f64, u32)> = Default::default();
        for u in samples {
            let (sum, n) = sums.entry(u.pid).or_default();
            *sum += f64::from(u.sm_util);
            *n += 1;
        }
        shares.sm_pct = sums
            .into_iter()
            .map(|(pid, (sum, n))| (pid, sum / f64::from(n)))
            .collect();
        Ok(())
    }

    /// The health counters, each on its own: a GPU without ECC (most GeForce boards) still
    /// counts PCIe replays. Not supported only when none of them is.
    fn read_health(&self, s: &mut Sample) -> Result<(), ReadError> {
        let d = &self.device;
        let mut any = false;
        let mut set = |s: &mut Sample, metric, value: Result<f64, NvmlError>| match value {
            Ok(v) => {
                s.set(metric, v);
                any = true;
                Ok(())
            }
            Err(NvmlError::GpuLost) => Err(ReadError::GpuLost("GPU lost".into())),
            Err(_) => Ok(()),
        };
        for (metric, error, counter) in [
            (
                Metric::EccVolatileCorrected,
                MemoryError::Corrected,
                EccCounter::Volatile,
            ),
            (
                Metric::EccVolatileUncorrected,
                MemoryError::Uncorrected,
                EccCounter::Volatile,
            ),
            (
                Metric::EccAggregateCorrected,
                MemoryError::Corrected,
                EccCounter::Aggregate,
            ),
            (
                Metric::EccAggregateUncorrected,
                MemoryError::Uncorrected,
                EccCounter::Aggregate,
            ),
        ] {
            set(
                s,
                metric,
                d.total_ecc_errors(error, counter).map(|n| n as f64),
            )?;
        }
        if let Some(get) = self.hot.remapped_rows {
            let (mut corrected, mut uncorrected, mut pending, mut failed) = (0, 0, 0, 0);
            // SAFETY: a valid device handle and four c_uint out-parameters, as nvml.h declares.
            let read = nvml_try(unsafe {
                get(
                    d.handle(),
                    &mut corrected,
                    &mut uncorrected,
                    &mut pending,
                    &mut failed,
                )
            });
            if read.is_ok() {
                for (metric, v) in [
                    (Metric::RemapCorrected, corrected),
                    (Metric::RemapUncorrected, uncorrected),
                    (Metric::RemapPending, pending),
                    (Metric::RemapFailed, failed),
                ] {
                    set(s, metric, Ok(f64::from(v)))?;
                }
            }
        }
        for (metric, cause) in [
            (
                Metric::RetiredSingleBit,
                RetirementCause::MultipleSingleBitEccErrors,
            ),
            (Metric::RetiredDoubleBit, RetirementCause::DoubleBitEccError),
        ] {
            set(s, metric, d.retired_pages(cause).map(|p| p.len() as f64))?;
        }
        set(
            s,
            Metric::RetiredPending,
            d.are_pages_pending_retired()
                .map(|p| f64::from(u8::from(p))),
        )?;
        set(
            s,
            Metric::PcieReplays,
            d.pcie_replay_counter().map(f64::from),
        )?;
        let ids = [
            FieldId(FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL),
            FieldId(FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL),
            FieldId(FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL),
        ];
        if let Ok(values) = d.field_values_for(&ids) {
            for (value, metric) in values.into_iter().zip([
                Metric::NvlinkCrcErrors,
                Metric::NvlinkReplayErrors,
                Metric::NvlinkRecoveryErrors,
            ]) {
                if let Ok(Ok(v)) = value.map(|v| v.value) {
                    set(s, metric, Ok(sample_value(&v)))?;
                }
            }
        }
        if any {
            Ok(())
        } else {
            Err(ReadError::NotSupported)
        }
    }

    /// How many NVLinks are up and how many are present but down, and each link's state and
    /// error counters (data CRC, replay, recovery). A link index the GPU does not have answers
    /// NotSupported or InvalidArgument and is left out; a GPU with none (PCIe boards without a
    /// bridge) is NotSupported as a whole.
    fn read_nvlink_state(&self, s: &mut Sample) -> Result<(), ReadError> {
        let mut links = Vec::new();
        for link in 0..NVLINK_MAX_LINKS {
            let wrapper = self.device.link_wrapper_for(link);
            let up = match wrapper.is_active() {
                Ok(up) => up,
                Err(NvmlError::GpuLost) => return Err(ReadError::GpuLost("GPU lost".into())),
                Err(_) => continue,
            };
            let count = |counter| wrapper.error_counter(counter).ok();
            links.push(crate::sample::NvlinkLink {
                link,
                up,
                crc: count(ErrorCounter::DlCrcData),
                replay: count(ErrorCounter::DlReplay),
                recovery: count(ErrorCounter::DlRecovery),
            });
        }
        if links.is_empty() {
            return Err(ReadError::NotSupported);
        }
        let up = links.iter().filter(|l| l.up).count();
        s.set(Metric::NvlinkLinksUp, up as f64);
        s.set(Metric::NvlinkLinksDown, (links.len() - up) as f64);
        s.nvlinks = Some(std::sync::Arc::new(links));
        Ok(())
    }

    /// NVLink rates (MiB/s) from the difference of NVML's cumulative data counters since the
    /// last read, timed by the driver's own timestamps. The first read only sets the baseline;
    /// a counter that went backwards (a driver reload) sets a new one.
    fn read_nvlink(&mut self, s: &mut Sample) -> Result<(), ReadError> {
        let ids = [
            FieldId(FI_DEV_NVLINK_THROUGHPUT_DATA_TX),
            FieldId(FI_DEV_NVLINK_THROUGHPUT_DATA_RX),
        ];
        let values = self.device.field_values_for(&ids).map_err(classify)?;
        let mut read = values.into_iter().map(|v| {
            let v = v.map_err(classify)?;
            let value = v.value.map_err(classify)?;
            Ok((v.timestamp, sample_value(&value)))
        });
        let (Some(tx), Some(rx)) = (read.next(), read.next()) else {
            return Err(ReadError::NotSupported);
        };
        let ((t_us, tx_kib), (_, rx_kib)) = (tx?, rx?);
        if let Some((t0, tx0, rx0)) = self.nvlink_last {
            let dt_s = (t_us - t0) as f64 / 1e6;
            if dt_s > 0.0 && tx_kib >= tx0 && rx_kib >= rx0 {
                s.set(Metric::NvmlNvlinkTx, (tx_kib - tx0) / KIB / dt_s);
                s.set(Metric::NvmlNvlinkRx, (rx_kib - rx0) / KIB / dt_s);
            }
        }
        self.nvlink_last = Some((t_us, tx_kib, rx_kib));
        Ok(())
    }
}

/// What NVML reports of a whole GPU's make-up, each `None` where the driver does not say: the
/// live side of its peak figures (`crate::spec`), which win over the SKU table's.
fn live_figures(d: &Device<'static>) -> LiveFigures {
    LiveFigures {
        mem_bus_width_bits: d.memory_bus_width().ok(),
        mem_clock_max_mhz: d.max_clock_info(Clock::Memory).ok().map(f64::from),
        cuda_cores: d.num_cores().ok(),
        arch: d
            .architecture()
            .ok()
            .filter(|a| *a != DeviceArchitecture::Unknown)
            .map(|a| a.as_c()),
        sm_count: None,
        gpm_supported: d.gpm_support().ok(),
    }
}
