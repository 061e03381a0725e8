//! The article's composite: effective efficiency = (power / TDP) × (SM activity / 100). Under
//! 0.6 the GPU is very likely slacking. It needs GPM's SM activity; GPU-Util would reintroduce
//! the very lie this tool exists to expose, so without GPM there is no efficiency.

/// The line under which the article calls a GPU slacking.
pub const SLACK_BELOW: f64 = 0.6;

/// (power / TDP) × (SM activity / 100); `None` without any of the three, never from
/// GPU-Util.
pub fn effective_efficiency(
    power_w: Option<f64>,
    tdp_w: Option<f64>,
    sm_pct: Option<f64>,
) -> Option<f64> {
    let tdp = tdp_w.filter(|t| *t > 0.0)?;
    Some((power_w? / tdp) * (sm_pct? / 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiency_is_power_share_times_sm_share() {
        // bf16 GEMM on the H200 reference: 691 W of 700 W at 96.6% SM.
        let e = effective_efficiency(Some(691.0), Some(700.0), Some(96.6)).expect("known");
        assert!((e - 0.9536).abs() < 1e-3, "{e}");
        // The CUDA-graph tiny kernels: 121 W, SM 1.1%, GPU-Util 100%.
        let e = effective_efficiency(Some(121.0), Some(700.0), Some(1.1)).expect("known");
        assert!(e < 0.002, "{e}");
        assert_eq!(effective_efficiency(Some(121.0), None, Some(1.1)), None);
        assert_eq!(effective_efficiency(Some(121.0), Some(700.0), None), None);
    }
}
