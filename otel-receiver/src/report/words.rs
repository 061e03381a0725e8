//! The verdicts in plain words, and the change each remedy asks for as one instruction that
//! names the code it touches. Class ids (`launch_bound`) are the contract of the JSON, `-v` and
//! `--detail`; the report's first screen and its default text speak to a person who has not
//! read docs/DIAGNOSIS.md, so they use these words instead.

use crate::diagnosis::{advice, Class, Thresholds};

/// A short name for a verdict, for table rows and lists (at most 18 characters).
pub fn label(class: Class) -> &'static str {
    match class {
        Class::Idle => "idle",
        Class::IdleHeld => "held but idle",
        Class::ComputeBound => "compute-limited",
        Class::MemoryBound => "memory-limited",
        Class::LaunchBound => "tiny kernels",
        Class::TransferBound => "host↔device copies",
        Class::InputStarved => "starved of input",
        Class::SyncWait => "waiting on peers",
        Class::Hung => "hung",
    }
}

/// What a GPU was doing under this verdict, after "N% of its time": "idle with nothing on it".
pub fn did(class: Class) -> &'static str {
    match class {
        Class::Idle => "idle with nothing on it",
        Class::IdleHeld => "held by a process that ran nothing",
        Class::ComputeBound => "computing at full speed",
        Class::MemoryBound => "moving data at its memory bandwidth's limit",
        Class::LaunchBound => "running kernels too small to fill it",
        Class::TransferBound => "copying data between host and GPU",
        Class::InputStarved => "waiting for input between short bursts of work",
        Class::SyncWait => "waiting for the other GPUs",
        Class::Hung => "stuck in a kernel that made no progress",
    }
}

/// What a GPU was doing, in words no bolder than its figures: "at its memory bandwidth's limit"
/// only where DRAM moved at least the diagnosis's busy line of its peak
/// ([`Thresholds::dram_busy_pct`]), else the share it did move, or that it was not measured.
pub fn did_measured(class: Class, dram_pct: Option<f64>) -> String {
    if class != Class::MemoryBound {
        return did(class).to_string();
    }
    match dram_pct {
        Some(d) if d >= Thresholds::default().dram_busy_pct => did(class).to_string(),
        Some(d) => format!(
            "bound by memory, with DRAM moving {} of its peak",
            crate::diagnosis::pct(d)
        ),
        None => "bound by memory (its DRAM bandwidth was not measured)".to_string(),
    }
}

/// A verdict's name as the text report shows it: plain words, or the class id where the reader
/// asked for ids (`-v`, `--detail`).
pub fn name(class: Class, ids: bool) -> &'static str {
    if ids {
        class.as_str()
    } else {
        label(class)
    }
}

/// The one change a remedy asks for, as an instruction naming the flag, variable or line it
/// touches. `remedy` is the text the diagnosis chose (a class's own, or an
/// [`advice`] that fits the evidence better); a remedy this table does not know yet is given as
/// its own "what to do" part, the sentences after the first.
pub fn change(remedy: &str, class: Class) -> String {
    let known = match remedy {
        r if r == advice::ALLOCATION_CHURN => Some(
            "Stop allocating device memory every step: allocate the buffers once and reuse them, remove torch.cuda.empty_cache() from the loop, and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
        ),
        r if r == advice::FEW_BLOCKS => Some(
            "Launch enough blocks to fill every SM (at least one per SM: a grid-stride loop or a two-pass reduction), or call a library primitive that does (CUB's DeviceReduce, torch.sum).",
        ),
        r if r == advice::SPIN => Some(
            "Find the spinning kernel (cuda-gdb: attach, then `info cuda kernels`; or `py-spy dump --pid PID` for the host threads), fix the code that should release its flag, then restart the job.",
        ),
        r if r == advice::HUNG_JOB || r == Class::Hung.remedy() => Some(
            "Dump every rank's stack (`py-spy dump --pid PID`), rerun with NCCL_DEBUG=INFO and TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a timeout in init_process_group(timeout=...), then restart the job.",
        ),
        r if r == advice::ON_CHIP_OR_SPIN => Some(
            "If the job makes no progress, treat it as a hang (`py-spy dump --pid PID`, cuda-gdb `info cuda kernels`); if it does, profile it (`nsys profile --stats=true`) to see which units it keeps busy.",
        ),
        r if r == advice::LATENCY_BOUND => Some(
            "Make the memory accesses coalesced (sort or bucket the indices, gather contiguous chunks) and keep the hot data in shared memory or L2 (cudaAccessPolicyWindow).",
        ),
        r if r == advice::HOST_PACED => Some(
            "Check first whether a profiler ran here: Nsight Compute (`ncu`) replays every kernel it profiles and reads just like this, kernels resident the same share of every second; if one did, judge the job from the windows without it. If none did, the loop waits on its host every step: remove .item(), .cpu() and torch.cuda.synchronize() from the step and capture it in a CUDA graph.",
        ),
        r if r == advice::PROFILER => Some(
            "Judge the job from the windows without the profiler (Nsight Compute `ncu`, Nsight Systems `nsys` or DCGM profiling held the counters); if none should run here, find the process that holds them: CUDA_INJECTION64_PATH or NSYS_* in its environment, or `dcgmi profile --pause`.",
        ),
        // The counters cannot see a model's memory format or dtype: hedged.
        r if r == advice::TENSOR_PARTLY => Some(
            "If not already channels_last, convert the convnet: model = model.to(memory_format=torch.channels_last), with torch.backends.cudnn.benchmark = True; if not already in bf16, run it under torch.autocast(\"cuda\", dtype=torch.bfloat16); then batch small GEMMs (dimensions multiples of 128) and fuse the element-wise ops with torch.compile.",
        ),
        r if r == Class::LaunchBound.remedy() => Some(
            "Fuse the small kernels: model = torch.compile(model, mode=\"reduce-overhead\"), which also captures the step in a CUDA graph (or capture it yourself with torch.cuda.graph); then grow the batch.",
        ),
        r if r == Class::InputStarved.remedy() => Some(
            "Feed the GPU faster: DataLoader(..., num_workers=len(os.sched_getaffinity(0)) // gpus_per_node, pin_memory=True, persistent_workers=True, prefetch_factor=4); if that is not enough, decode on the GPU (NVIDIA DALI).",
        ),
        r if r == Class::TransferBound.remedy() => Some(
            "Cut the copies: keep tensors on the GPU between steps, build the DataLoader with pin_memory=True, and copy with .to(\"cuda\", non_blocking=True) so copies overlap compute.",
        ),
        r if r == Class::IdleHeld.remedy() => Some(
            "Release the GPU when its work is done: let the process exit, or free its memory (del the model and optimizer, then torch.cuda.empty_cache()); if it is one rank waiting for the others, look at them.",
        ),
        r if r == Class::SyncWait.remedy() => Some(
            "Overlap communication with compute: `with model.no_sync():` on gradient-accumulation steps, tune DDP(bucket_cap_mb=...), balance the pipeline stages; find the straggler with `nsys profile --stats=true`.",
        ),
        r if r == Class::ComputeBound.remedy() => Some(
            "Nothing is wasted here; to go faster, if the matmuls are not already in bf16, run them on the tensor cores: `with torch.autocast(\"cuda\", dtype=torch.bfloat16):` around the forward pass.",
        ),
        r if r == Class::MemoryBound.remedy() => Some(
            "Nothing is wasted here; to go faster, move fewer bytes: fuse element-wise ops with torch.compile(model) and, if they are not already, keep activations in bf16.",
        ),
        r if r == Class::Idle.remedy() => Some(
            "Nothing is wasted here: nothing held the GPU. If a job should have used it, check its CUDA_VISIBLE_DEVICES and the scheduler.",
        ),
        _ => None,
    };
    match known {
        Some(text) => text.to_string(),
        None => {
            // The "what to do" part of a remedy: every remedy opens with what is wrong.
            let rest = remedy
                .split_once(". ")
                .map_or(remedy, |(_, rest)| rest)
                .trim();
            if rest.is_empty() {
                class.remedy().to_string()
            } else {
                rest.to_string()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_words_without_its_id() {
        for class in Class::ALL {
            for words in [label(class), did(class)] {
                assert!(!words.contains('_'), "{class}: {words}");
            }
            assert!(label(class).chars().count() <= 18, "{class}");
            assert_eq!(name(class, true), class.as_str());
            // Each class's own remedy has an instruction that names code, not a paraphrase.
            let change = change(class.remedy(), class);
            assert!(change.len() > 40, "{class}: {change}");
            assert_ne!(change, class.remedy(), "{class}");
        }
    }

    #[test]
    fn bandwidth_words_go_no_further_than_the_dram_figure() {
        let line = Thresholds::default().dram_busy_pct;
        assert_eq!(line, 60.0);
        assert_eq!(
            did_measured(Class::MemoryBound, Some(60.0)),
            "moving data at its memory bandwidth's limit"
        );
        let under = did_measured(Class::MemoryBound, Some(59.9));
        assert!(!under.contains("limit"), "{under}");
        assert!(under.contains("60%"), "{under}");
        assert_eq!(
            did_measured(Class::MemoryBound, Some(50.0)),
            "bound by memory, with DRAM moving 50% of its peak"
        );
        assert!(did_measured(Class::MemoryBound, None).contains("not measured"));
        assert_eq!(
            did_measured(Class::LaunchBound, Some(5.0)),
            did(Class::LaunchBound)
        );
    }

    #[test]
    fn advice_the_counters_cannot_check_is_hedged() {
        let tensor = change(advice::TENSOR_PARTLY, Class::ComputeBound);
        assert!(
            tensor.starts_with("If not already channels_last"),
            "{tensor}"
        );
        assert!(tensor.contains("if not already in bf16"), "{tensor}");
        let compute = change(Class::ComputeBound.remedy(), Class::ComputeBound);
        assert!(compute.contains("not already in bf16"), "{compute}");
        let paced = change(advice::HOST_PACED, Class::InputStarved);
        assert!(paced.contains("Nsight Compute (`ncu`)"), "{paced}");
    }

    #[test]
    fn the_change_names_the_flag_it_touches() {
        let change = |c: Class| change(c.remedy(), c);
        assert!(change(Class::LaunchBound).contains("torch.compile"));
        assert!(change(Class::LaunchBound).contains("CUDA graph"));
        assert!(change(Class::InputStarved).contains("num_workers"));
        assert!(change(Class::InputStarved).contains("pin_memory=True"));
        assert!(change(Class::TransferBound).contains("non_blocking=True"));
        assert!(change(Class::SyncWait).contains("no_sync"));
        assert!(super::change(advice::ALLOCATION_CHURN, Class::InputStarved)
            .contains("PYTORCH_CUDA_ALLOC_CONF"));
    }

    #[test]
    fn an_unknown_remedy_gives_its_own_instructions() {
        let text = "Something new is wrong. Do this, then that.";
        assert_eq!(change(text, Class::LaunchBound), "Do this, then that.");
    }
}
