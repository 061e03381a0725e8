//! Output files as the commands name them: the library's one way of writing a file
//! (`gpuslack_receiver::files`: beside and renamed over, never through a link), its errors
//! prefixed with the flag the path came from (`--out /tmp/x: is a symbolic link; …`).

use std::path::Path;

use anyhow::{anyhow, Result};
use gpuslack_receiver::files::{self, OutputError};

/// The library's error, with the flag named before the path ("" for a file no flag names,
/// such as the facts beside a trace).
pub fn named(flag: &str, e: OutputError) -> anyhow::Error {
    if flag.is_empty() {
        anyhow!(e)
    } else {
        anyhow!("{flag} {e}")
    }
}

/// Refuses `path` when it is a symbolic link, naming the flag: checked before a file is read
/// that is about to be replaced, and before a command starts work whose output it would be.
pub fn refuse_link(flag: &str, path: &Path) -> Result<()> {
    files::refuse_link(path).map_err(|e| named(flag, e))
}

/// Writes `bytes` as `path`, whole: beside it, synced, renamed over it.
pub fn write_replacing(flag: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    files::write_replacing(path, bytes).map_err(|e| named(flag, e))
}
