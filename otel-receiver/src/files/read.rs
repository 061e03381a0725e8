//! Every input file of every command read one way: bounded by what its kind can hold, and only
//! where it is a regular file. A facts file linked to `/dev/zero` took `replay` to 11 GB in
//! 15 s, `--profile /dev/zero` to 7.1 GB, an environment linked to it under `doctor
//! --proc-root` to 4.2 GB; a FIFO at one of these names hung the command until a writer came.
//!
//! The file is opened without waiting (`O_NONBLOCK`, so that opening a FIFO cannot block), its
//! kind checked on the open descriptor (no race between a check and the open), and a regular
//! file read to at most its kind's cap plus one byte: a file past the cap is refused, naming
//! the file and the cap, having read no more than the cap. A `/proc` file reports a size of 0
//! and is read the same way; an environment is read to its cap and cut there instead
//! ([`read_head`]), as the attribution has always cut it.
//!
//! Each kind's cap is in docs/RELIABILITY.md ("Input files and their caps"), checked against
//! [`Input::ALL`] by this module's tests.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

/// What a file is read as; each kind has its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The facts beside a trace (`samples.facts.json`): about 1 KB a GPU.
    TraceFacts,
    /// A calibration profile file (`--profile`, `calibrate --compare-with`, the old
    /// `calibrate --out` merged into): a few KB a GPU.
    Profile,
    /// A `score` labels file: segments of a scenario, a few hundred bytes each.
    Labels,
    /// A calibration session's `phases.json`: one line a workload phase.
    Phases,
    /// The agent's TOML config: the fullest example is about 2 KB.
    Config,
    /// A `/proc` file (`stat`, `status`, `cgroup`, `comm`, a `sys/kernel` value) or
    /// `/etc/passwd`.
    Proc,
    /// A process's `/proc/PID/environ`, read to its cap and cut there ([`read_head`]).
    Environ,
}

impl Input {
    /// Every kind, for the documentation check.
    pub const ALL: [Input; 7] = [
        Input::TraceFacts,
        Input::Profile,
        Input::Labels,
        Input::Phases,
        Input::Config,
        Input::Proc,
        Input::Environ,
    ];

    /// The most bytes a file of this kind may hold. Each is a thousand times what a real one
    /// holds or more, and small enough that refusing it costs a few MiB at most.
    pub const fn cap_bytes(self) -> u64 {
        match self {
            // 1,000 GPUs' facts are about 1 MB.
            Input::TraceFacts => 4 << 20,
            // A profile with its workloads is about 3 KB a GPU: over 1,000 GPUs fit.
            Input::Profile => 4 << 20,
            // 20,000 segments.
            Input::Labels => 16 << 20,
            Input::Phases => 4 << 20,
            // The config's own bound since #40: 1 MiB.
            Input::Config => 1 << 20,
            // `/etc/passwd` of a large directory-backed host; a `/proc` file is a few KB.
            Input::Proc => 16 << 20,
            // What the attribution has always read of an environment: its variables are a few
            // KB; a job launcher's can reach 100 KB.
            Input::Environ => 256 << 10,
        }
    }

    /// What the file is, as an error names it.
    pub const fn what(self) -> &'static str {
        match self {
            Input::TraceFacts => "trace facts file",
            Input::Profile => "profile file",
            Input::Labels => "labels file",
            Input::Phases => "phases file",
            Input::Config => "config file",
            Input::Proc => "/proc file",
            Input::Environ => "process environment",
        }
    }
}

/// The cap as a person reads it: `4 MiB`, `256 KiB`.
pub fn shown_cap(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// Why an input file was not read; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// It could not be opened (missing, no permission).
    #[error("{path}: cannot read: {source}")]
    Open {
        /// The path given.
        path: String,
        /// The system's error.
        source: io::Error,
    },
    /// It is a directory, a FIFO, a device or a socket where a regular file is meant.
    #[error("{path}: is {found}, not a regular file: a {} must be one", what.what())]
    NotRegular {
        /// The path given.
        path: String,
        /// What is there: "a directory", "a FIFO", "a character device"…
        found: &'static str,
        /// What it was read as.
        what: Input,
    },
    /// It holds more than its kind's cap.
    #[error("{path}: larger than {}, the most a {} may be: refused before it is read whole", shown_cap(what.cap_bytes()), what.what())]
    TooLarge {
        /// The path given.
        path: String,
        /// What it was read as.
        what: Input,
    },
    /// Reading failed part-way.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The system's error.
        source: io::Error,
    },
    /// It is not UTF-8 text where text is meant.
    #[error("{path}: not UTF-8 text: a {} is text", what.what())]
    NotText {
        /// The path given.
        path: String,
        /// What it was read as.
        what: Input,
    },
}

impl ReadError {
    /// Whether the file is not there at all (a facts file is optional).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Open { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// What a file's type is, in words, for one that is not a regular file.
fn kind_of(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}

/// `path` opened for reading without waiting, checked to be a regular file, and its metadata.
fn open_file(path: &Path, what: Input) -> Result<(File, std::fs::Metadata), ReadError> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = || path.display().to_string();
    let file = OpenOptions::new()
        .read(true)
        // A FIFO opens at once instead of waiting for a writer; a regular file ignores it.
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| ReadError::Open {
            path: shown(),
            source,
        })?;
    let meta = file.metadata().map_err(|source| ReadError::Open {
        path: shown(),
        source,
    })?;
    if let Some(found) = kind_of(&meta) {
        return Err(ReadError::NotRegular {
            path: shown(),
            found,
            what,
        });
    }
    Ok((file, meta))
}

/// [`open_file`], refused where the file's size is already past `what`'s cap.
fn open_regular(path: &Path, what: Input) -> Result<File, ReadError> {
    let (file, meta) = open_file(path, what)?;
    if meta.len() > what.cap_bytes() {
        return Err(ReadError::TooLarge {
            path: path.display().to_string(),
            what,
        });
    }
    Ok(file)
}

/// At most `cap + 1` bytes of `file`.
fn read_up_to(file: File, path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| ReadError::Read {
            path: path.display().to_string(),
            source,
        })?;
    Ok(bytes)
}

/// The whole of the regular file `path`, refused past `what`'s cap.
pub fn read_bounded(path: &Path, what: Input) -> Result<Vec<u8>, ReadError> {
    let file = open_regular(path, what)?;
    let bytes = read_up_to(file, path, what.cap_bytes())?;
    if bytes.len() as u64 > what.cap_bytes() {
        // A file that grew, or a `/proc` file, which reports no size.
        return Err(ReadError::TooLarge {
            path: path.display().to_string(),
            what,
        });
    }
    Ok(bytes)
}

/// The whole of the regular file `path` as text, refused past `what`'s cap.
pub fn read_text(path: &Path, what: Input) -> Result<String, ReadError> {
    String::from_utf8(read_bounded(path, what)?).map_err(|_| ReadError::NotText {
        path: path.display().to_string(),
        what,
    })
}

/// Whether the regular file `path` can be read: opened (where the kernel checks a `/proc`
/// file's access) and one byte read, without waiting on a FIFO.
pub fn probe(path: &Path, what: Input) -> Result<(), ReadError> {
    let mut file = open_regular(path, what)?;
    file.read(&mut [0u8; 1])
        .map(drop)
        .map_err(|source| ReadError::Read {
            path: path.display().to_string(),
            source,
        })
}

/// The first `what.cap_bytes()` of the regular file `path`, and whether it went on past them:
/// for a file whose head is all that is needed (a process's environment).
pub fn read_head(path: &Path, what: Input) -> Result<(Vec<u8>, bool), ReadError> {
    let (file, _) = open_file(path, what)?;
    let mut bytes = read_up_to(file, path, what.cap_bytes())?;
    let cut = bytes.len() as u64 > what.cap_bytes();
    bytes.truncate(what.cap_bytes() as usize);
    Ok((bytes, cut))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::PathBuf;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gpuslack-read-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    fn fifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: mkfifo reads a C string that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// Each kind refuses `/dev/zero` through a link, a FIFO (at once: no writer ever comes), a
    /// directory and a file one byte past its cap, each error naming the file and what it is;
    /// a file at its cap is read whole.
    #[test]
    fn every_kind_refuses_devices_fifos_folders_and_files_past_its_cap() {
        let dir = dir("kinds");
        let zero = dir.join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
        let pipe = dir.join("pipe.json");
        fifo(&pipe);
        let folder = dir.join("folder.json");
        fs::create_dir(&folder).expect("mkdir");
        for what in Input::ALL {
            let started = std::time::Instant::now();
            let e = read_bounded(&zero, what).expect_err("/dev/zero");
            assert_eq!(
                e.to_string(),
                format!(
                    "{}: is a character device, not a regular file: a {} must be one",
                    zero.display(),
                    what.what()
                )
            );
            assert!(read_head(&zero, what).is_err());
            let e = read_bounded(&pipe, what).expect_err("FIFO");
            assert!(
                e.to_string().contains("is a FIFO, not a regular file"),
                "{e}"
            );
            assert!(read_head(&pipe, what).is_err());
            let e = read_bounded(&folder, what).expect_err("folder");
            assert!(e.to_string().contains("is a directory"), "{e}");
            assert!(started.elapsed() < std::time::Duration::from_secs(1));

            let cap = what.cap_bytes();
            let big = dir.join("big");
            fs::write(&big, vec![b'a'; cap as usize + 1]).expect("write");
            let e = read_bounded(&big, what).expect_err("past the cap");
            assert_eq!(
                e.to_string(),
                format!(
                    "{}: larger than {}, the most a {} may be: refused before it is read whole",
                    big.display(),
                    shown_cap(cap),
                    what.what()
                )
            );
            let (head, cut) = read_head(&big, what).expect("head");
            assert_eq!((head.len() as u64, cut), (cap, true));
            fs::write(&big, vec![b'a'; cap as usize]).expect("write");
            assert_eq!(read_text(&big, what).expect("at the cap").len() as u64, cap);
            let (head, cut) = read_head(&big, what).expect("head");
            assert_eq!((head.len() as u64, cut), (cap, false));
        }
        assert_eq!(shown_cap(Input::Config.cap_bytes()), "1 MiB");
        assert_eq!(shown_cap(Input::Environ.cap_bytes()), "256 KiB");
    }

    #[test]
    fn every_kind_and_its_cap_is_in_the_reliability_table() {
        let doc = include_str!("../../../docs/RELIABILITY.md");
        let table = &doc[doc
            .find("### Input files and their caps")
            .expect("the section")..];
        for what in Input::ALL {
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("| {}", what.what())))
                .unwrap_or_else(|| panic!("no row for the {}", what.what()));
            assert!(
                row.ends_with(&format!("| {} |", shown_cap(what.cap_bytes()))),
                "{row}"
            );
        }
    }

    #[test]
    fn a_proc_file_with_no_size_is_read_and_a_missing_file_is_told_apart() {
        let status = read_text(Path::new("/proc/self/status"), Input::Proc).expect("status");
        assert!(status.contains("VmRSS"), "{status}");
        let e = read_bounded(Path::new("/nonexistent/facts.json"), Input::TraceFacts)
            .expect_err("missing");
        assert!(e.is_not_found());
        let dir = dir("text");
        let bad = dir.join("bad.toml");
        fs::write(&bad, [0xff, 0xfe]).expect("write");
        assert_eq!(
            read_text(&bad, Input::Config)
                .expect_err("bytes")
                .to_string(),
            format!("{}: not UTF-8 text: a config file is text", bad.display())
        );
    }
}
