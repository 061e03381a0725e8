//! Xid events: one thread waits on NVML's event set for every GPU.

use super::*;

/// Xid events since the agent started, per GPU index: how many, and the last code. NVML hands
/// events to whoever waits on an event set, so one thread waits for all GPUs and the sampler's
/// reads copy its counts (an atomic load each), whatever the cadence.
pub struct XidWatch {
    pub(super) counts: Vec<(AtomicU64, AtomicU64)>,
}

impl XidWatch {
    /// Registers every GPU that can report Xid events and starts the waiting thread; `None`
    /// when no GPU can (a MIG instance never can: events are the GPU's).
    pub(super) fn start(nvml: &'static Nvml, gpus: u32) -> Option<std::sync::Arc<XidWatch>> {
        let mut set = match nvml.create_event_set() {
            Ok(set) => set,
            Err(e) => {
                tracing::info!(error = %e, "NVML events unavailable: Xid errors will not be counted");
                return None;
            }
        };
        let mut registered = 0;
        for index in 0..gpus {
            let Ok(device) = nvml.device_by_index(index) else {
                continue;
            };
            let supported = device
                .supported_event_types()
                .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
            if !supported {
                continue;
            }
            match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(back) => {
                    set = back;
                    registered += 1;
                }
                // A failed registration frees the set: start again with a new one for the rest.
                Err(e) => {
                    tracing::warn!(gpu = index, error = %e.error, "cannot register for Xid events");
                    match nvml.create_event_set() {
                        Ok(fresh) => set = fresh,
                        Err(_) => return None,
                    }
                }
            }
        }
        if registered == 0 {
            return None;
        }
        let watch = std::sync::Arc::new(XidWatch {
            counts: (0..gpus)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
        });
        let seen = watch.clone();
        let spawned = std::thread::Builder::new()
            .name("gpuslack-xid".into())
            .spawn(move || loop {
                // Times out every second so that an interrupted wait costs nothing; the thread
                // lives as long as the process.
                match set.wait(1000) {
                    Ok(event) => {
                        let code = match event.event_data {
                            Some(XidError::Value(code)) => code,
                            _ => 0,
                        };
                        let index = event.device.index().unwrap_or(u32::MAX);
                        // NVIDIA's catalogue's meaning and immediate action, where it has the code.
                        let known = u32::try_from(code).ok().and_then(crate::hw_health::lookup);
                        tracing::warn!(
                            gpu = index,
                            xid = code,
                            meaning = known.map_or("not in gpuslack's table", |x| x.meaning),
                            action = known.map_or("unknown", |x| x.action.as_str()),
                            "Xid error reported by the driver"
                        );
                        if let Some((n, last)) = seen.counts.get(index as usize) {
                            n.fetch_add(1, Ordering::Relaxed);
                            last.store(code, Ordering::Relaxed);
                        }
                    }
                    Err(NvmlError::Timeout) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "waiting for Xid events failed; no more are counted");
                        return;
                    }
                }
            });
        match spawned {
            Ok(_) => Some(watch),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the Xid thread");
                None
            }
        }
    }
}
