//! What NVIDIA's own documents say a GPU's health readings mean, in one place for the exports,
//! the reports and the alert rules: the Xid catalogue (each code's meaning and whether the GPU
//! or the node needs an action), and when a PCIe link trained below its maximum is a finding
//! rather than the driver's power saving. Pure: tables and window statistics in, words out.

use crate::sample::Metric;
use crate::window::WindowStats;

/// The catalogue's *Resolution Bucket (Immediate Action)* for an Xid, in the catalogue's own
/// words: <https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XidAction {
    /// `RESTART_APP`: the application's error (or its share of a contained one); the GPU
    /// stays usable.
    RestartApp,
    /// `IGNORE`: informational.
    Ignore,
    /// `RESET_GPU`: the GPU must be reset before it is used again.
    ResetGpu,
    /// `RESTART_BM`: the node must be rebooted (bare metal).
    RebootNode,
    /// `RESTART_VM`: the virtual machine must be restarted.
    RestartVm,
    /// `CHECK_MECHANICALS`: power cabling or seating.
    CheckMechanicals,
    /// `WORKFLOW_*` / `XID_154`: a reset or reboot, as the workflow or Xid 154 that follows
    /// it says.
    ResetOrReboot,
}

impl XidAction {
    /// The label value on `gpuslack.xid.errors` and the words of a report.
    pub fn as_str(self) -> &'static str {
        match self {
            XidAction::RestartApp => "restart_app",
            XidAction::Ignore => "ignore",
            XidAction::ResetGpu => "reset_gpu",
            XidAction::RebootNode => "reboot_node",
            XidAction::RestartVm => "restart_vm",
            XidAction::CheckMechanicals => "check_mechanicals",
            XidAction::ResetOrReboot => "reset_or_reboot",
        }
    }

    /// Whether the GPU or the node needs an operator's action (a reset, a reboot, a look at
    /// the hardware): the Xids that page (`GpuXidError` in deploy/prometheus/gpuslack-rules.yml).
    pub fn needs_operator(self) -> bool {
        !matches!(self, XidAction::RestartApp | XidAction::Ignore)
    }
}

/// One Xid of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xid {
    /// The number the driver logs (`NVRM: Xid (PCI:…): 79, …`).
    pub code: u32,
    /// The catalogue's mnemonic and description, shortened.
    pub meaning: &'static str,
    /// What the catalogue says to do at once.
    pub action: XidAction,
}

const fn xid(code: u32, meaning: &'static str, action: XidAction) -> Xid {
    Xid {
        code,
        meaning,
        action,
    }
}

use XidAction::*;

/// The Xids a data-centre GPU (Ampere and later) reports in practice, from NVIDIA's catalogue
/// (link above, columns *Code*, *Mnemonic*, *Description*, *Resolution Bucket (Immediate
/// Action)*); docs/DEPLOY.md lists the ones that page. A code not here is reported by number
/// with an unknown action, and does not page.
pub const XIDS: [Xid; 38] = [
    xid(8, "GPU stopped processing (FIFO idle timeout)", RestartApp),
    xid(13, "Graphics engine exception", RestartApp),
    xid(31, "GPU memory page fault", RestartApp),
    xid(32, "Invalid or corrupted push buffer stream", RestartApp),
    xid(43, "GPU stopped processing (reset channel)", RestartApp),
    xid(45, "Preemptive cleanup, due to previous errors", RestartApp),
    xid(46, "GPU stopped processing (GPU timeout)", ResetGpu),
    xid(48, "Double-bit ECC error", ResetOrReboot),
    xid(54, "Auxiliary power not connected", CheckMechanicals),
    xid(62, "Internal micro-controller halt (PMU)", ResetGpu),
    xid(
        63,
        "Row remapping or page retirement event recorded",
        Ignore,
    ),
    xid(64, "Row remapping failed (InfoROM)", ResetGpu),
    xid(68, "Video processor exception", RestartApp),
    xid(69, "Graphics engine class error", RestartApp),
    xid(74, "NVLink error", ResetOrReboot),
    xid(79, "GPU has fallen off the bus", RebootNode),
    xid(92, "High single-bit ECC error rate", Ignore),
    xid(94, "Contained ECC error", RestartApp),
    xid(95, "Uncontained ECC error", ResetGpu),
    xid(109, "Context switch timeout", ResetGpu),
    xid(110, "Security fault", ResetGpu),
    xid(119, "GSP RPC timeout", ResetGpu),
    xid(120, "GSP error", ResetGpu),
    xid(136, "Link training failed (ALI)", ResetGpu),
    xid(140, "Unrecoverable ECC error escape", ResetGpu),
    xid(143, "GPU initialisation error", ResetGpu),
    xid(144, "NVLink SAW error", ResetOrReboot),
    xid(145, "NVLink RLW error", ResetOrReboot),
    xid(146, "NVLink TLW error", ResetOrReboot),
    xid(147, "NVLink TREX error", ResetOrReboot),
    xid(148, "NVLink NVLPW control error", ResetOrReboot),
    xid(149, "NVLink NETIR error", ResetOrReboot),
    xid(150, "NVLink MSE error", ResetOrReboot),
    xid(
        151,
        "Key rotation error (confidential computing)",
        RestartVm,
    ),
    xid(
        154,
        "GPU recovery action changed (reset or reboot required)",
        ResetOrReboot,
    ),
    xid(155, "NVLink software-defined error", ResetGpu),
    xid(156, "Resource retirement event", ResetGpu),
    xid(158, "GPU fatal timeout", ResetGpu),
];

/// The catalogue's entry for `code`, if the table has it.
pub fn lookup(code: u32) -> Option<&'static Xid> {
    XIDS.iter().find(|x| x.code == code)
}

/// Every code whose immediate action is the GPU's or the node's, in ascending order: the
/// set `GpuXidError` pages on (a test holds the rule file to it).
pub fn operator_codes() -> Vec<u32> {
    XIDS.iter()
        .filter(|x| x.action.needs_operator())
        .map(|x| x.code)
        .collect()
}

/// A window counts as "under load" for the link check when kernels ran at least this share of
/// it (GPU-Util, %)…
pub const LINK_LOAD_UTIL_PCT: f64 = 50.0;
/// …or the link carried at least this much (MiB/s, either direction, NVML's or GPM's
/// counter): a copy-only phase loads the link without a kernel.
pub const LINK_LOAD_PCIE_MIB_S: f64 = 1024.0;

/// A PCIe link trained below its maximum, as read in one window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkShortfall {
    /// The generation and width the link reached (the window's best reading)…
    pub gen: f64,
    /// …in lanes…
    pub width: f64,
    /// …and the most this GPU and slot allow.
    pub gen_max: f64,
    /// The most lanes this GPU and slot allow.
    pub width_max: f64,
}

impl LinkShortfall {
    /// "gen3 x16 of gen5 x16".
    pub fn describe(&self) -> String {
        format!(
            "gen{:.0} x{:.0} of gen{:.0} x{:.0}",
            self.gen, self.width, self.gen_max, self.width_max
        )
    }
}

/// The link's shortfall in `w`, if it is one. Many NVIDIA boards drop the link *generation*
/// at idle to save power and retrain to full speed when work or traffic arrives (nvidia-smi
/// then reads "Current: 1" of "Max: 3" or "4" at idle, x16 throughout, and the maximum under
/// load: docs/EXPORT.md cites the reports), so a generation below the maximum counts only in
/// a window under load, and there only if the link never reached the maximum in it (the
/// window's highest reading). The *width* stays put through that power saving: a link narrower
/// than its maximum at any time is downtrained (a bad riser, slot or seating) and counts
/// always. The H200 of docs/validation/h200-nvml-fields.txt held gen5 x16 idle and loaded.
pub fn link_shortfall(w: &WindowStats) -> Option<LinkShortfall> {
    LinkReading::of(w)?.shortfall(w)
}

/// What the PCIe link read in a window: its best generation and width, and their maximums.
/// The link is read every 10 s, so most windows have none: a caller that follows a GPU over
/// time holds the last reading and judges each window's load against it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkReading {
    /// The highest generation and width read in the window…
    pub gen: f64,
    /// …in lanes…
    pub width: f64,
    /// …and the most this GPU and slot allow.
    pub gen_max: f64,
    /// The most lanes this GPU and slot allow.
    pub width_max: f64,
}

impl LinkReading {
    /// The window's reading, `None` where the link was not read in it.
    pub fn of(w: &WindowStats) -> Option<LinkReading> {
        Some(LinkReading {
            gen: w.max(Metric::PcieLinkGen)?,
            width: w.max(Metric::PcieLinkWidth)?,
            gen_max: w.max(Metric::PcieLinkGenMax)?,
            width_max: w.max(Metric::PcieLinkWidthMax)?,
        })
    }

    /// This reading's shortfall in window `w`, judged by `w`'s load ([`link_shortfall`]).
    pub fn shortfall(&self, w: &WindowStats) -> Option<LinkShortfall> {
        let pcie = [
            Metric::NvmlPcieRx,
            Metric::NvmlPcieTx,
            Metric::GpmPcieRx,
            Metric::GpmPcieTx,
        ]
        .into_iter()
        .filter_map(|m| w.max(m))
        .fold(0.0, f64::max);
        let loaded = w
            .max(Metric::UtilGpu)
            .is_some_and(|u| u >= LINK_LOAD_UTIL_PCT)
            || pcie >= LINK_LOAD_PCIE_MIB_S;
        let narrow = self.width < self.width_max;
        let slow = loaded && self.gen < self.gen_max;
        (narrow || slow).then_some(LinkShortfall {
            gen: self.gen,
            width: self.width,
            gen_max: self.gen_max,
            width_max: self.width_max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Sample;
    use crate::window::GpuWindower;

    #[test]
    fn the_catalogue_names_each_code_and_its_action() {
        let x79 = lookup(79).expect("79");
        assert_eq!(
            (x79.meaning, x79.action),
            ("GPU has fallen off the bus", RebootNode)
        );
        assert!(x79.action.needs_operator());
        let x13 = lookup(13).expect("13");
        assert_eq!(x13.action, RestartApp);
        assert!(!x13.action.needs_operator());
        assert!(!lookup(63).expect("63").action.needs_operator());
        assert_eq!(lookup(158).expect("158").action, ResetGpu);
        assert_eq!(lookup(7), None);
        // The codes are unique and the main table sorted, so lookups are unambiguous.
        let codes: Vec<u32> = XIDS.iter().map(|x| x.code).collect();
        assert!(codes.windows(2).all(|p| p[0] < p[1]), "{codes:?}");
    }

    #[test]
    fn the_paging_codes_are_the_actionable_ones() {
        let codes = operator_codes();
        assert_eq!(
            codes,
            vec![
                46, 48, 54, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 144, 145, 146,
                147, 148, 149, 150, 151, 154, 155, 156, 158
            ]
        );
    }

    /// One 2 s window of 10 Hz samples, each made by `row`.
    fn window(row: impl Fn(Sample) -> Sample) -> WindowStats {
        let mut w = GpuWindower::new(0, 2.0);
        for i in 0..20 {
            let t = 100.0 + f64::from(i) / 10.0;
            assert_eq!(
                w.push(&row(Sample::new(t, 0))).map(|c| c.is_none()),
                Ok(true)
            );
        }
        w.finish().expect("a window")
    }

    fn link(s: Sample, gen: f64, width: f64, util: f64) -> Sample {
        s.with(Metric::PcieLinkGen, gen)
            .with(Metric::PcieLinkWidth, width)
            .with(Metric::PcieLinkGenMax, 5.0)
            .with(Metric::PcieLinkWidthMax, 16.0)
            .with(Metric::UtilGpu, util)
    }

    #[test]
    fn a_link_below_its_maximum_is_a_finding_only_where_it_is_not_power_saving() {
        // Under load (GPU-Util 100%), gen4 of gen5: the link trained short.
        let slow = link_shortfall(&window(|s| link(s, 4.0, 16.0, 100.0))).expect("slow");
        assert_eq!(slow.describe(), "gen4 x16 of gen5 x16");
        // The same generation on an idle GPU is the driver's power saving: no finding.
        assert_eq!(link_shortfall(&window(|s| link(s, 1.0, 16.0, 0.0))), None);
        // Just under the load threshold, idle; at it, loaded.
        let at = |util| link_shortfall(&window(|s| link(s, 3.0, 16.0, util)));
        assert_eq!(at(LINK_LOAD_UTIL_PCT - 1.0), None);
        assert!(at(LINK_LOAD_UTIL_PCT).is_some());
        // Copies alone load the link: 1 GiB/s over NVML's counter with GPU-Util 0.
        let copying = |mib_s| {
            link_shortfall(&window(|s| {
                link(s, 2.0, 16.0, 0.0).with(Metric::NvmlPcieRx, mib_s)
            }))
        };
        assert_eq!(copying(LINK_LOAD_PCIE_MIB_S - 1.0), None);
        assert!(copying(LINK_LOAD_PCIE_MIB_S).is_some());
        // A width below its maximum is downtraining, idle or not.
        let narrow = link_shortfall(&window(|s| link(s, 1.0, 8.0, 0.0))).expect("narrow");
        assert_eq!(narrow.describe(), "gen1 x8 of gen5 x16");
        // At the maximum, loaded: nothing.
        assert_eq!(link_shortfall(&window(|s| link(s, 5.0, 16.0, 100.0))), None);
        // The link retrained to the maximum within the window: its best reading counts.
        let retrained = window(|s| {
            let gen = if s.t < 100.5 { 1.0 } else { 5.0 };
            link(s, gen, 16.0, 100.0)
        });
        assert_eq!(link_shortfall(&retrained), None);
        // Without the maximum (an older trace) there is nothing to compare with.
        let no_max = window(|s| {
            s.with(Metric::PcieLinkGen, 1.0)
                .with(Metric::PcieLinkWidth, 8.0)
        });
        assert_eq!(link_shortfall(&no_max), None);
    }
}
