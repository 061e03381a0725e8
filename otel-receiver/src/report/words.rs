//! The verdicts in plain words, and the change each remedy asks for as one instruction that
//! names the code it touches. Class ids (`launch_bound`) are the contract of the JSON, `-v` and
//! `--detail`; the report's first screen and its default text speak to a person who has not
//! read docs/DIAGNOSIS.md, so they use these words instead.

use crate::diagnosis::{advice, Class};

/// A short name for a verdict, for table rows and lists (at most 18 characters).
pub fn label(class: Class) -> &'static str {
    match class {
        Class::Idle => "idle",
        Class::IdleHeld => "held but idle",
        Class::ComputeBound => "compute-limited",
        Class::MemoryBound => "memory-limited",
        Class::LatencyBound => "busy, not fast",
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
        Class::LatencyBound => "busy, but with no unit near its peak",
        Class::LaunchBound => "running kernels too small to fill it",
        Class::TransferBound => "copying data between host and GPU",
        Class::InputStarved => "waiting for input between short bursts of work",
        Class::SyncWait => "waiting for the other GPUs",
        Class::Hung => "stuck in a kernel that made no progress",
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
        r if r == advice::LATENCY_SCATTERED => Some(
            "Make neighbouring threads touch neighbouring addresses: sort the indices once if they are reused across steps, or use a segmented reduction (CSR sparse product, torch_scatter) instead of index_add_/scatter_ over random indices.",
        ),
        r if r == advice::LATENCY_PYTORCH => Some(
            "Fuse the step: model = torch.compile(model) (mode=\"reduce-overhead\" also captures a CUDA graph), then grow the batch until a unit nears its peak.",
        ),
        r if r == advice::LATENCY_CUSTOM || r == Class::LatencyBound.remedy() => Some(
            "Confirm on one step with Nsight Compute's SpeedOfLight section, then give each kernel more independent work: fuse small kernels, grow the batch, coalesce accesses and raise occupancy.",
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
            "Nothing is wasted here; to go faster, run the matmuls in bf16 on the tensor cores: `with torch.autocast(\"cuda\", dtype=torch.bfloat16):` around the forward pass.",
        ),
        r if r == Class::MemoryBound.remedy() => Some(
            "Nothing is wasted here; to go faster, move fewer bytes: fuse element-wise ops with torch.compile(model) and keep activations in bf16.",
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
