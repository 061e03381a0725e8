//! The binary trace format (`.gstrace`, docs/OUTPUT.md): the same samples as a CSV trace, each
//! value exactly as read, in half the bytes, in checksummed blocks that decode in about 1,500
//! instructions a row where a CSV row takes 5,000 to parse. CSV stays the format to read and
//! edit; this one is for recordings replayed often or long: a week of a node, an archive.

mod format;
mod read;
mod write;

pub(crate) use format::MAGIC;
pub(super) use read::BinaryChunks;
pub use write::BinaryTraceWriter;
