//! Opening a trace for the pipeline: the file, its `facts.json` if one sits beside it, and the
//! TDP to divide by.

use std::path::Path;

use anyhow::{bail, Context, Result};
use gpuslack_receiver::device::DeviceFacts;
use gpuslack_receiver::{Diagnoser, Pipeline, Thresholds};

/// Window length and TDP flags shared by the commands that run the pipeline.
#[derive(clap::Args, Debug, Clone)]
pub struct PipelineArgs {
    /// TDP in W for the efficiency; default: the trace's power_default_limit_mw column or facts.json.
    #[arg(long, value_name = "W")]
    pub tdp_w: Option<f64>,
    /// Window length in seconds.
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    pub window_s: f64,
}

impl PipelineArgs {
    pub fn validate(&self) -> Result<()> {
        if !(self.window_s.is_finite() && self.window_s >= 0.1 && self.window_s <= 3600.0) {
            bail!(
                "--window-s must be between 0.1 and 3600 seconds, got {}",
                self.window_s
            );
        }
        if let Some(tdp) = self.tdp_w {
            if !(tdp.is_finite() && tdp > 0.0) {
                bail!("--tdp-w must be a positive number of watts, got {tdp}");
            }
        }
        Ok(())
    }

    pub fn pipeline(&self, facts: DeviceFacts) -> Pipeline {
        let diagnoser = Diagnoser::new(Thresholds::default())
            .with_default_facts(facts)
            .with_tdp_override(self.tdp_w);
        Pipeline::new(self.window_s, diagnoser)
    }
}

/// The facts beside a trace, or empty facts when there are none.
pub fn facts_beside(trace: &Path) -> Result<DeviceFacts> {
    Ok(DeviceFacts::beside_trace(trace)
        .with_context(|| format!("reading the device facts beside {}", trace.display()))?
        .unwrap_or_default())
}
