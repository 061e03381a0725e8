//! The verdicts in plain words, and the change each remedy asks for as one instruction that
//! names the code it touches. Class ids (`launch_bound`) are the contract of the JSON, `-v` and
//! `--detail`; the report's first screen and its default text speak to a person who has not
//! read docs/DIAGNOSIS.md, so they use these words instead.

use crate::diagnosis::{Advice, Class};

/// A short name for a verdict, for table rows and lists (at most 18 characters).
pub fn label(class: Class) -> &'static str {
    class.info().label
}

/// What a GPU was doing under this verdict, after "N% of its time": "idle with nothing on it".
pub fn did(class: Class) -> &'static str {
    class.info().did
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
            assert_eq!(name(class, true), class.as_str());
            // Each class's own remedy has an instruction that names code, not a paraphrase.
            let change = change(Advice::Own, class);
            assert!(change.len() > 40, "{class}: {change}");
            assert_ne!(change, class.remedy(), "{class}");
        }
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
        let change = change(Advice::HostPaced, Class::InputStarved);
        assert!(
            change.starts_with("First check whether a profiler is attached"),
            "{change}"
        );
    }
}
