//! Sources of samples. Each produces [`crate::Sample`]s and nothing after them knows which
//! source it was: a recorded trace and live GPUs run through the same pipeline.

pub mod live;
pub mod replay;
