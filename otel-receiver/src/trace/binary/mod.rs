//! The binary trace format (`.gstrace`, docs/OUTPUT.md): the same samples as a CSV trace, each
//! value exactly as read, in checksummed blocks that decode at a few hundred instructions a row
//! instead of the thousands a CSV row takes to parse. CSV stays the format to read and edit;
//! this one is for recordings replayed often or long: a week of a node, a fleet's archive.

mod format;
mod read;
mod write;

pub(crate) use format::MAGIC;
pub(super) use read::BinaryChunks;
pub use write::BinaryTraceWriter;
