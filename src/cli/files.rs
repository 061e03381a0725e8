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

/// Refuses `path` as an output file, naming the flag: a symbolic link, a FIFO or a socket.
/// Checked before a file is read that is about to be replaced, and before a command starts
/// work whose output it would be.
pub fn check_output(flag: &str, path: &Path) -> Result<()> {
    files::check_output(path).map_err(|e| named(flag, e))
}

/// Writes `bytes` as `path`, whole: beside it, synced, renamed over it.
pub fn write_replacing(flag: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    files::write_replacing(path, bytes).map_err(|e| named(flag, e))
}
