//! The verdicts in plain words, and the change each remedy asks for as one instruction that
//! names the code it touches. Class ids (`launch_bound`) are the contract of the JSON, `-v` and
//! `--detail`; the report's first screen and its default text speak to a person who has not
//! read docs/DIAGNOSIS.md, so they use these words instead.

use crate::diagnosis::{Advice, Class, Thresholds};

/// A short name for a verdict, for table rows and lists (at most 18 characters).
pub fn label(class: Class) -> &'static str {
    class.info().label
}

/// A short name for a fix: its advice's own where it has one ([`Advice::label`]), else its
/// verdict's.
pub fn fix_label(advice: Advice, class: Class) -> &'static str {
    advice.label().unwrap_or_else(|| label(class))
}

/// What a GPU was doing under this verdict, after "N% of its time": "idle with nothing on it".
pub fn did(class: Class) -> &'static str {
    class.info().did
}

/// What a GPU was doing, in words no bolder than its figures: "at its memory bandwidth's limit"
/// only where DRAM moved at least the diagnosis's busy line of its peak
/// ([`Thresholds::bound_line_pct`]), else the share it did move, or that it was not measured.
pub fn did_measured(class: Class, dram_pct: Option<f64>) -> String {
    if class != Class::MemoryBound {
        return did(class).to_string();
    }
    match dram_pct {
        Some(d) if d >= Thresholds::default().bound_line_pct => did(class).to_string(),
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
/// touches: the advice's own ([`Advice::change`]), else the "what to do" part of its text, the
/// sentences after the first.
pub fn change(advice: Advice, class: Class) -> String {
    if let Some(text) = advice.change(class) {
        return text.to_string();
    }
    // The "what to do" part of a remedy: every remedy opens with what is wrong.
    let remedy = advice.text(class);
    let rest = remedy
        .split_once(". ")
        .map_or(remedy, |(_, rest)| rest)
        .trim();
    if rest.is_empty() {
        remedy.to_string()
    } else {
        rest.to_string()
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
            assert_eq!(fix_label(Advice::Own, class), label(class));
            assert_eq!(name(class, true), class.as_str());
            // Each class's own remedy has an instruction that names code, not a paraphrase.
            let change = change(Advice::Own, class);
            assert!(change.len() > 40, "{class}: {change}");
            assert_ne!(change, class.remedy(), "{class}");
        }
    }

    #[test]
    fn bandwidth_words_go_no_further_than_the_dram_figure() {
        let line = Thresholds::default().bound_line_pct;
        assert_eq!(line, 60.0);
        assert_eq!(
            did_measured(Class::MemoryBound, Some(60.0)),
            "moving data, DRAM at 60% of its peak or more"
        );
        let under = did_measured(Class::MemoryBound, Some(59.9));
        assert!(!under.contains("or more"), "{under}");
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
        let tensor = change(Advice::TensorPartly, Class::ComputeBound);
        assert!(
            tensor.starts_with("If not already channels_last"),
            "{tensor}"
        );
        assert!(tensor.contains("if not already in bf16"), "{tensor}");
        let compute = change(Advice::Own, Class::ComputeBound);
        assert!(compute.contains("not already in bf16"), "{compute}");
        let paced = change(Advice::HostPaced, Class::InputStarved);
        assert!(paced.contains("Nsight Compute (`ncu`)"), "{paced}");
    }

    #[test]
    fn the_change_names_the_flag_it_touches() {
        let change = |c: Class| change(Advice::Own, c);
        assert!(change(Class::LaunchBound).contains("torch.compile"));
        assert!(change(Class::LaunchBound).contains("CUDA graph"));
        assert!(change(Class::InputStarved).contains("num_workers"));
        assert!(change(Class::InputStarved).contains("pin_memory=True"));
        assert!(change(Class::TransferBound).contains("non_blocking=True"));
        assert!(change(Class::SyncWait).contains("no_sync"));
        assert!(super::change(Advice::AllocationChurn, Class::InputStarved)
            .contains("PYTORCH_CUDA_ALLOC_CONF"));
        assert!(
            super::change(Advice::Own, Class::LatencyBound).contains("ncu --section SpeedOfLight")
        );
    }

    #[test]
    fn advice_without_an_instruction_gives_its_own_what_to_do() {
        let change = change(Advice::OffloadBothWays, Class::InputStarved);
        assert!(change.starts_with("Pin the host buffers"), "{change}");
    }

    #[test]
    fn a_fix_of_one_long_kernel_on_few_blocks_is_not_called_tiny_kernels() {
        assert_eq!(
            fix_label(Advice::FewBlocks, Class::LaunchBound),
            "too few blocks"
        );
        assert_eq!(
            fix_label(Advice::LatencyScattered, Class::LatencyBound),
            label(Class::LatencyBound)
        );
        if let Some(own) = Advice::FewBlocks.label() {
            assert!(own.chars().count() <= 18 && !own.contains('_'), "{own}");
        }
    }
}
