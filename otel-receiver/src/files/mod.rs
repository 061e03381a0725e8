//! Every output file of every command, written one way: never through a symbolic link, and
//! never half. `calibrate`, `record` and `diagnose` often run as root (NVML, the workloads), and
//! a link planted at the name they are given (`/tmp/report.html` → `/etc/passwd`) must not
//! have root write over the file it points at; a hard link planted there must not have its
//! file truncated either.
//!
//! - [`write_replacing`]: a file written whole (a report, a profile, a facts file): into a new
//!   file beside it, synced, then renamed over the name (and the folder synced). A reader sees the old file or the new
//!   one, never half of either; a failure leaves the old one.
//! - [`Replacing`]: the same for a file streamed out (`convert`'s trace), renamed over the name
//!   by [`Replacing::commit`] once whole, removed if dropped before.
//! - [`create_in_place`]: a file that must hold what was written even if the program is killed
//!   half-way (`record`'s trace, flushed every tick): the new file is created beside and
//!   renamed over the name at once, and written under its own name from then on. Renaming at
//!   the end would leave a crashed recording under a hidden temporary name.
//!
//! A name that is a device (`/dev/null`) is written to as it is, never replaced: renaming over
//! `/dev/null` as root would replace the device with a file. A FIFO or a socket at the name is
//! refused, by [`check_output`] before the work starts and when the file is opened: writing
//! into a FIFO no reader holds waited forever (`diagnose --html`, `convert`, `fleet job --html`,
//! `calibrate --out` all hung), and a file written whole cannot be one.
//!
//! Input files are read the one way of `files/read.rs` ([`read_bounded`], [`read_head`]):
//! bounded by their kind's cap, regular files only.
//!
//! Each refuses a symbolic link at the name, dangling or not, with an error naming the path;
//! the new file is created exclusively (`O_EXCL`), so a link at the temporary name is not
//! followed either, and the rename replaces a link put at the name after the check rather
//! than following it. An existing file's permissions are kept.

mod read;

pub use read::{probe, read_bounded, read_head, read_text, shown_cap, Input, ReadError};

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Why an output file was not written; each names the path.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The name is a symbolic link.
    #[error("{path}: is a symbolic link; gpuslack writes no file through one (give the path it points at, or remove the link)")]
    Link {
        /// The path given.
        path: String,
    },
    /// A FIFO or a socket at the name.
    #[error("{path}: is {found}; gpuslack writes no output into one, which would hang the command until a reader came (give a file's path)")]
    NotAFile {
        /// The path given.
        path: String,
        /// "a FIFO" or "a socket".
        found: &'static str,
    },
    /// No file could be made beside it (a missing folder, no permission).
    #[error("{path}: cannot write beside it: {source}")]
    Beside {
        /// The path given.
        path: String,
        /// The system's error.
        source: io::Error,
    },
    /// Writing, syncing or renaming failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The path given.
        path: String,
        /// The system's error.
        source: io::Error,
    },
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// Refuses `path` when it is a symbolic link (dangling or not). Also for a file about to be
/// read before it is replaced (`calibrate --out` merges into an existing profile file), so that
/// the link is not followed for reading either.
pub fn refuse_link(path: &Path) -> Result<(), OutputError> {
    if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(OutputError::Link { path: shown(path) });
    }
    Ok(())
}

/// Refuses `path` as an output file before the work starts: a symbolic link ([`refuse_link`]),
/// a FIFO or a socket ([`OutputError::NotAFile`]).
pub fn check_output(path: &Path) -> Result<(), OutputError> {
    refuse_link(path)?;
    match fs::symlink_metadata(path) {
        Ok(meta) => match not_a_file(&meta) {
            Some(found) => Err(OutputError::NotAFile {
                path: shown(path),
                found,
            }),
            None => Ok(()),
        },
        Err(_) => Ok(()),
    }
}

/// "a FIFO" or "a socket" where `meta` is one.
fn not_a_file(meta: &fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        None
    }
}

/// The name's device, opened for writing (not following a link), where the name is one; `None`
/// for a regular file, a directory or nothing; a FIFO or a socket refused.
fn special(path: &Path) -> Result<Option<File>, OutputError> {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(meta) = fs::symlink_metadata(path) else {
        return Ok(None);
    };
    let kind = meta.file_type();
    if kind.is_file() || kind.is_dir() || kind.is_symlink() {
        return Ok(None);
    }
    if let Some(found) = not_a_file(&meta) {
        return Err(OutputError::NotAFile {
            path: shown(path),
            found,
        });
    }
    OpenOptions::new()
        .write(true)
        // A FIFO made at the name since the check is not waited on either.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map(Some)
        .map_err(|source| OutputError::Write {
            path: shown(path),
            source,
        })
}

/// Writes `bytes` as `path`: into a new file beside it, synced, then renamed over it.
pub fn write_replacing(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let mut out = Replacing::create(path)?;
    out.write_all(bytes).map_err(|source| OutputError::Write {
        path: shown(path),
        source,
    })?;
    out.commit()
}

/// A file being written beside `path`, renamed over it by [`Replacing::commit`]; removed if
/// dropped before.
#[derive(Debug)]
pub struct Replacing {
    target: PathBuf,
    /// The file beside, or `None` where the name is a device or a pipe written as it is.
    temp: Option<PathBuf>,
    file: Option<io::BufWriter<File>>,
}

impl Replacing {
    /// Refuses a link at `path`, then creates the new file beside it.
    pub fn create(path: &Path) -> Result<Replacing, OutputError> {
        refuse_link(path)?;
        let (temp, file) = match special(path)? {
            Some(device) => (None, device),
            None => {
                let (temp, file) = create_beside(path).map_err(|source| OutputError::Beside {
                    path: shown(path),
                    source,
                })?;
                (Some(temp), file)
            }
        };
        Ok(Replacing {
            target: path.to_path_buf(),
            temp,
            file: Some(io::BufWriter::with_capacity(256 * 1024, file)),
        })
    }

    /// Flushes, syncs and renames the file over the name asked for.
    pub fn commit(mut self) -> Result<(), OutputError> {
        let err = |source| OutputError::Write {
            path: shown(&self.target),
            source,
        };
        let Some(writer) = self.file.take() else {
            return Ok(());
        };
        let Some(temp) = self.temp.take() else {
            // A device or a pipe: written through, nothing to sync or rename.
            return writer
                .into_inner()
                .map(drop)
                .map_err(|e| err(e.into_error()));
        };
        let done = (|| -> io::Result<()> {
            let file = writer
                .into_inner()
                .map_err(io::IntoInnerError::into_error)?;
            keep_permissions(&self.target, &file)?;
            file.sync_all()?;
            fs::rename(&temp, &self.target)?;
            sync_dir(&self.target);
            Ok(())
        })();
        if let Err(e) = done {
            let _ = fs::remove_file(&temp);
            return Err(err(e));
        }
        Ok(())
    }
}

impl Write for Replacing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.file {
            Some(f) => f.write(buf),
            None => Err(io::Error::other("already committed")),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.write_all(buf),
            None => Err(io::Error::other("already committed")),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for Replacing {
    fn drop(&mut self) {
        if let (Some(_), Some(temp)) = (self.file.take(), &self.temp) {
            let _ = fs::remove_file(temp);
        }
    }
}

/// A new, empty file under the name `path`, for a file written as it goes that must survive
/// a crash: created beside (exclusively) and renamed over the name at once. Refuses a link at
/// the name.
pub fn create_in_place(path: &Path) -> Result<File, OutputError> {
    refuse_link(path)?;
    if let Some(device) = special(path)? {
        return Ok(device);
    }
    let (temp, file) = create_beside(path).map_err(|source| OutputError::Beside {
        path: shown(path),
        source,
    })?;
    let placed = keep_permissions(path, &file).and_then(|()| fs::rename(&temp, path));
    if placed.is_ok() {
        sync_dir(path);
    }
    if let Err(source) = placed {
        let _ = fs::remove_file(&temp);
        return Err(OutputError::Write {
            path: shown(path),
            source,
        });
    }
    Ok(file)
}

/// Syncs the folder holding `path`, so that the rename is kept through a power cut as the
/// file's bytes are. Best effort: some file systems refuse to sync a folder, and the file is
/// whole either way.
fn sync_dir(path: &Path) {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Gives `file` the permissions of the regular file at `path`, if there is one.
fn keep_permissions(path: &Path, file: &File) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(old) if old.is_file() => file.set_permissions(old.permissions()),
        _ => Ok(()),
    }
}

/// A new, empty file in `path`'s directory, named after it, created exclusively.
fn create_beside(path: &Path) -> io::Result<(PathBuf, File)> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    let mut last = None;
    for attempt in 0..100u32 {
        let temp = dir.join(format!(".{name}.{}.{attempt}.tmp", std::process::id()));
        // create_new is O_CREAT | O_EXCL: it fails on anything at that name, a link included.
        match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary name")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("gpuslack-files-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_file_is_replaced_whole_keeping_its_permissions_and_no_temporary_is_left() {
        let dir = dir("replace");
        let path = dir.join("profiles.toml");
        fs::write(&path, "old, and longer than the new").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");
        write_replacing(&path, b"new").expect("written");
        assert_eq!(fs::read_to_string(&path).expect("read"), "new");
        let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert_eq!(names(&dir), ["profiles.toml"]);
    }

    #[test]
    fn a_link_is_refused_by_every_way_and_what_it_points_at_is_untouched() {
        let dir = dir("link");
        let victim = dir.join("victim");
        fs::write(&victim, "precious").expect("write");
        let link = dir.join("report.html");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        let e = write_replacing(&link, b"<html>").expect_err("refused");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: is a symbolic link; gpuslack writes no file through one (give the path it points at, or remove the link)",
                link.display()
            )
        );
        assert!(matches!(
            Replacing::create(&link),
            Err(OutputError::Link { .. })
        ));
        assert!(matches!(
            create_in_place(&link),
            Err(OutputError::Link { .. })
        ));
        assert_eq!(fs::read_to_string(&victim).expect("read"), "precious");
        // Dangling: refused too, and nothing is created where it points.
        let dangling = dir.join("dangling");
        std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).expect("symlink");
        assert!(write_replacing(&dangling, b"x").is_err());
        assert!(create_in_place(&dangling).is_err());
        assert!(!dir.join("nowhere").exists());
        assert_eq!(names(&dir), ["dangling", "report.html", "victim"]);
    }

    #[test]
    fn a_hard_link_at_the_name_is_replaced_not_truncated() {
        let dir = dir("hardlink");
        let victim = dir.join("victim");
        fs::write(&victim, "precious").expect("write");
        let name = dir.join("trace.csv");
        fs::hard_link(&victim, &name).expect("hard link");
        let mut f = create_in_place(&name).expect("created");
        f.write_all(b"t,gpu\n").expect("write");
        assert_eq!(fs::read_to_string(&victim).expect("read"), "precious");
        assert_eq!(fs::read_to_string(&name).expect("read"), "t,gpu\n");
    }

    #[test]
    fn a_streamed_file_appears_only_once_committed() {
        let dir = dir("stream");
        let path = dir.join("out.gstrace");
        fs::write(&path, "old").expect("write");
        let mut out = Replacing::create(&path).expect("created");
        out.write_all(b"new whole").expect("write");
        assert_eq!(fs::read_to_string(&path).expect("read"), "old");
        out.commit().expect("committed");
        assert_eq!(fs::read_to_string(&path).expect("read"), "new whole");
        // Dropped half-way: the old file stays, the temporary goes.
        let mut out = Replacing::create(&path).expect("created");
        out.write_all(b"half").expect("write");
        drop(out);
        assert_eq!(fs::read_to_string(&path).expect("read"), "new whole");
        assert_eq!(names(&dir), ["out.gstrace"]);
    }

    #[test]
    fn a_device_is_written_to_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let null = Path::new("/dev/null");
        write_replacing(null, b"report").expect("written");
        let mut out = Replacing::create(null).expect("opened");
        out.write_all(b"trace").expect("write");
        out.commit().expect("committed");
        create_in_place(null)
            .expect("opened")
            .write_all(b"recording")
            .expect("write");
        let kind = fs::symlink_metadata(null).expect("stat").file_type();
        assert!(kind.is_char_device(), "/dev/null is no longer a device");
    }

    #[test]
    fn a_fifo_at_the_name_is_refused_at_once_by_every_way_and_left_as_it_is() {
        use std::os::unix::fs::FileTypeExt;
        let dir = dir("fifo");
        let fifo = dir.join("pipe");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: mkfifo reads a C string that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        let message = format!(
            "{}: is a FIFO; gpuslack writes no output into one, which would hang the command until a reader came (give a file's path)",
            fifo.display()
        );
        assert_eq!(check_output(&fifo).expect_err("FIFO").to_string(), message);
        assert_eq!(
            write_replacing(&fifo, b"x").expect_err("FIFO").to_string(),
            message
        );
        assert!(matches!(
            Replacing::create(&fifo),
            Err(OutputError::NotAFile { .. })
        ));
        assert!(matches!(
            create_in_place(&fifo),
            Err(OutputError::NotAFile { .. })
        ));
        // No reader ever came: each returned at once rather than waiting for one.
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert!(fs::symlink_metadata(&fifo)
            .expect("stat")
            .file_type()
            .is_fifo());
        assert_eq!(names(&dir), ["pipe"]);
        // A regular file, a device and nothing at all pass the check.
        check_output(Path::new("/dev/null")).expect("a device");
        check_output(&dir.join("new.html")).expect("nothing there");
    }

    #[test]
    fn a_recording_is_under_its_own_name_from_the_start() {
        let dir = dir("in-place");
        let path = dir.join("rec.csv");
        let mut f = create_in_place(&path).expect("created");
        f.write_all(b"t,gpu\n").expect("write");
        // Nothing committed: killed now, the file is there with what was written.
        assert_eq!(fs::read_to_string(&path).expect("read"), "t,gpu\n");
        assert_eq!(names(&dir), ["rec.csv"]);
    }
}
