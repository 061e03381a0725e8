//! The remedy, chosen once: after the rules, the rules across GPUs and the guard have settled
//! the class, one function picks what to do from the verdict and what is known of the job.
//! Before, five stages each overwrote the text and the last write won; the order below is the
//! one they happened to run in, written down once.
//!
//! [`Advice`] names each piece of advice, so that what depends on it (the report's one-line
//! instruction, `report/words.rs`) matches on the name, not on the text.

use super::class::advice;
use super::Class;
use crate::attribution::GpuProcess;

/// Which remedy a window gets: the class's own, or advice that follows the evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Advice {
    /// The class's own remedy ([`Class::remedy`]).
    #[default]
    Own,
    Spin,
    HungJob,
    AllocationChurn,
    FewBlocks,
    OnChipOrSpin,
    LowIntensityMemory,
    PartlyFilledCompute,
    Fp32NoTensor,
    TensorPartly,
    OffloadBothWays,
    HostPaced,
    Profiler,
    LatencyScattered,
    LatencyPytorch,
    LatencyCustom,
}

impl Advice {
    /// The remedy's text for a window of `class`.
    pub fn text(self, class: Class) -> &'static str {
        match self {
            Advice::Own => class.remedy(),
            Advice::Spin => advice::SPIN,
            Advice::HungJob => advice::HUNG_JOB,
            Advice::AllocationChurn => advice::ALLOCATION_CHURN,
            Advice::FewBlocks => advice::FEW_BLOCKS,
            Advice::OnChipOrSpin => advice::ON_CHIP_OR_SPIN,
            Advice::LowIntensityMemory => advice::LOW_INTENSITY_MEMORY,
            Advice::PartlyFilledCompute => advice::PARTLY_FILLED_COMPUTE,
            Advice::Fp32NoTensor => advice::FP32_NO_TENSOR,
            Advice::TensorPartly => advice::TENSOR_PARTLY,
            Advice::OffloadBothWays => advice::OFFLOAD_BOTH_WAYS,
            Advice::HostPaced => advice::HOST_PACED,
            Advice::Profiler => advice::PROFILER,
            Advice::LatencyScattered => advice::LATENCY_SCATTERED,
            Advice::LatencyPytorch => advice::LATENCY_PYTORCH,
            Advice::LatencyCustom => advice::LATENCY_CUSTOM,
        }
    }

    /// A short name for what its windows had, where the advice says it better than its
    /// verdict's label: a `launch_bound` window given [`Advice::FewBlocks`] is one long kernel
    /// on a few SMs, not the tiny kernels `launch_bound` is named for. At most 18 characters,
    /// as the labels are.
    pub fn label(self) -> Option<&'static str> {
        match self {
            Advice::FewBlocks => Some("too few blocks"),
            _ => None,
        }
    }

    /// The one change the advice asks for, as an instruction naming the flag, variable or line
    /// it touches; `None` where it has none of its own beyond its text.
    pub fn change(self, class: Class) -> Option<&'static str> {
        Some(match self {
            Advice::Own => return class.info().instruction,
            Advice::AllocationChurn => "Stop allocating device memory every step: allocate the buffers once and reuse them, remove torch.cuda.empty_cache() from the loop, and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
            Advice::FewBlocks => "Launch enough blocks to fill every SM (at least one per SM: a grid-stride loop or a two-pass reduction), or call a library primitive that does (CUB's DeviceReduce, torch.sum).",
            Advice::Spin => "Find the spinning kernel (cuda-gdb: attach, then `info cuda kernels`; or `py-spy dump --pid PID` for the host threads), fix the code that should release its flag, then restart the job.",
            Advice::HungJob => Class::Hung.info().instruction?,
            Advice::OnChipOrSpin => "If the job makes no progress, treat it as a hang (`py-spy dump --pid PID`, cuda-gdb `info cuda kernels`); if it does, profile it (`nsys profile --stats=true`) to see which units it keeps busy.",
            Advice::LatencyScattered => "Make neighbouring threads touch neighbouring addresses: sort the indices once if they are reused across steps, or use a segmented reduction (CSR sparse product, torch_scatter) instead of index_add_/scatter_ over random indices.",
            Advice::LatencyPytorch => "Fuse the step: model = torch.compile(model) (mode=\"reduce-overhead\" also captures a CUDA graph), then grow the batch until a unit nears its peak.",
            Advice::LatencyCustom => Class::LatencyBound.info().instruction?,
            Advice::HostPaced => "Check first whether a profiler ran here: Nsight Compute (`ncu`) replays every kernel it profiles and reads just like this, kernels resident the same share of every second; if one did, judge the job from the windows without it. If none did, the loop waits on its host every step: remove .item(), .cpu() and torch.cuda.synchronize() from the step and capture it in a CUDA graph.",
            Advice::Profiler => "Judge the job from the windows without the profiler (Nsight Compute `ncu`, Nsight Systems `nsys` or DCGM profiling held the counters); if none should run here, find the process that holds them: CUDA_INJECTION64_PATH or NSYS_* in its environment, or `dcgmi profile --pause`.",
            // The counters cannot see a model's memory format or dtype: hedged.
            Advice::TensorPartly => "If not already channels_last, convert the convnet: model = model.to(memory_format=torch.channels_last), with torch.backends.cudnn.benchmark = True; if not already in bf16, run it under torch.autocast(\"cuda\", dtype=torch.bfloat16); then batch small GEMMs (dimensions multiples of 128) and fuse the element-wise ops with torch.compile.",
            Advice::LowIntensityMemory
            | Advice::PartlyFilledCompute
            | Advice::Fp32NoTensor
            | Advice::OffloadBothWays => return None,
        })
    }
}

/// What is known of the job that holds the GPU, for advice that differs by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// A PyTorch process (its main thread renamed `pt_main_thread`, or `torchrun`), or a
    /// Python process, whose GPU work is framework code (PyTorch's levers, hedged).
    Framework,
    /// A process of another name: kernels of its own.
    Native,
    /// No process list.
    Unknown,
}

impl JobKind {
    /// From the processes holding the GPU in the window.
    pub fn of(processes: Option<&[GpuProcess]>) -> JobKind {
        let Some(list) = processes.filter(|p| !p.is_empty()) else {
            return JobKind::Unknown;
        };
        let framework = list.iter().any(|p| {
            p.name.as_deref().is_some_and(|n| {
                let n = n.to_ascii_lowercase();
                n.starts_with("python") || n.contains("torch") || n.starts_with("pt_")
            })
        });
        if framework {
            JobKind::Framework
        } else if list.iter().any(|p| p.name.is_some()) {
            JobKind::Native
        } else {
            JobKind::Unknown
        }
    }
}

/// What the stages before the remedy found, each once: the rule's advice, what the context
/// rules saw beside the class, what the rules across GPUs and the guard decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Found {
    /// The deciding rule's advice, where the evidence says more than the class.
    pub rule: Option<Advice>,
    /// Memory in use swinging by a large share of the GPU each second.
    pub churn: bool,
    /// Copies both ways while the GPU is partly idle.
    pub both_ways: bool,
    /// Kernels resident a steady share of every sample: the host sets the pace.
    pub host_paced: bool,
    /// A profiler held the counters (silent GPM, or a profiler among the processes).
    pub profiler: bool,
    /// The rules across GPUs re-decided the class, and with what advice.
    pub peers: Option<Advice>,
    /// The guard re-decided the class (an invariant was broken).
    pub guard: bool,
}

/// The remedy for a window of `class`, chosen once. A profiler's advice comes first: the
/// counters the verdict rests on were the profiler's. A class the guard re-decided gets its own
/// remedy, as does one the rules across GPUs re-decided (unless they named a hung job). Then
/// what the context saw (a host-paced loop, copies both ways, allocation churn), then the
/// rule's advice, then, for latency, advice by the kind of job.
pub fn choose(class: Class, found: &Found, job: JobKind) -> Advice {
    if found.profiler {
        return Advice::Profiler;
    }
    if found.guard {
        return Advice::Own;
    }
    if let Some(peers) = found.peers {
        return peers;
    }
    if found.host_paced {
        return Advice::HostPaced;
    }
    if found.both_ways {
        return Advice::OffloadBothWays;
    }
    if found.churn {
        return Advice::AllocationChurn;
    }
    if let Some(rule) = found.rule {
        return rule;
    }
    match (class, job) {
        (Class::LatencyBound, JobKind::Framework) => Advice::LatencyPytorch,
        (Class::LatencyBound, JobKind::Native) => Advice::LatencyCustom,
        _ => Advice::Own,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> Vec<GpuProcess> {
        vec![GpuProcess {
            pid: 1,
            name: Some(name.into()),
            ..GpuProcess::default()
        }]
    }

    #[test]
    fn latency_advice_follows_the_job_and_the_order_is_written_once() {
        let none = Found::default();
        assert_eq!(JobKind::of(Some(&named("python3"))), JobKind::Framework);
        assert_eq!(
            JobKind::of(Some(&named("pt_main_thread"))),
            JobKind::Framework
        );
        assert_eq!(JobKind::of(Some(&named("bench_gather"))), JobKind::Native);
        assert_eq!(JobKind::of(Some(&[])), JobKind::Unknown);
        assert_eq!(JobKind::of(None), JobKind::Unknown);
        let latency = |job| choose(Class::LatencyBound, &none, job);
        assert_eq!(latency(JobKind::Framework), Advice::LatencyPytorch);
        assert_eq!(latency(JobKind::Native), Advice::LatencyCustom);
        assert_eq!(latency(JobKind::Unknown), Advice::Own);
        // The rule's own advice (the scatter's loads) before the job's kind.
        let scattered = Found {
            rule: Some(Advice::LatencyScattered),
            ..none
        };
        assert_eq!(
            choose(Class::LatencyBound, &scattered, JobKind::Framework),
            Advice::LatencyScattered
        );
        // Context before the rule, the peers before the context, the guard before the peers,
        // a profiler before all.
        let all = Found {
            rule: Some(Advice::LatencyScattered),
            churn: true,
            both_ways: true,
            host_paced: true,
            profiler: true,
            peers: Some(Advice::HungJob),
            guard: true,
        };
        assert_eq!(
            choose(Class::Hung, &all, JobKind::Unknown),
            Advice::Profiler
        );
        let all = Found {
            profiler: false,
            ..all
        };
        assert_eq!(choose(Class::Hung, &all, JobKind::Unknown), Advice::Own);
        let all = Found {
            guard: false,
            ..all
        };
        assert_eq!(choose(Class::Hung, &all, JobKind::Unknown), Advice::HungJob);
        let all = Found { peers: None, ..all };
        assert_eq!(
            choose(Class::InputStarved, &all, JobKind::Unknown),
            Advice::HostPaced
        );
        let all = Found {
            host_paced: false,
            ..all
        };
        assert_eq!(
            choose(Class::InputStarved, &all, JobKind::Unknown),
            Advice::OffloadBothWays
        );
        let all = Found {
            both_ways: false,
            ..all
        };
        assert_eq!(
            choose(Class::InputStarved, &all, JobKind::Unknown),
            Advice::AllocationChurn
        );
        // Every latency text carries the ncu command that confirms it.
        for a in [
            Advice::Own,
            Advice::LatencyScattered,
            Advice::LatencyPytorch,
            Advice::LatencyCustom,
        ] {
            assert!(
                a.text(Class::LatencyBound)
                    .contains(super::super::NCU_COMMAND),
                "{a:?}"
            );
        }
    }
}
