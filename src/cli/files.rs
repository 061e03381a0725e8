//! Output files written whole, never through a link: `calibrate --out` and `--report` often
//! run as root (the workloads need the GPU to themselves), and a symbolic link planted at the
//! name they are given (`/tmp/calibration.html` → `/etc/passwd`) must not have root write over
//! the file it points at. A reader of the file meanwhile sees the old one or the new one,
//! never half of either.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Refuses `path` when it is a symbolic link (dangling or not), naming the flag it came from.
/// Checked before the file is read (`--out` merges into an existing profile file) so that
/// the link is not followed for reading either.
pub fn refuse_link(flag: &str, path: &Path) -> Result<()> {
    if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        bail!(
            "{flag} {}: is a symbolic link; gpuslack writes no file through one (give the path it points at, or remove the link)",
            path.display()
        );
    }
    Ok(())
}

/// Writes `bytes` as `path`: into a new file beside it, then renamed over it. The rename
/// replaces a link put there after [`refuse_link`] looked, rather than following it, and the
/// new file is created exclusively, so a link at its name is not followed either. An existing
/// file's permissions are kept.
pub fn write_replacing(flag: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    refuse_link(flag, path)?;
    let (temp, mut file) = create_beside(path)
        .with_context(|| format!("{flag} {}: cannot write beside it", path.display()))?;
    let written = (|| -> io::Result<()> {
        if let Ok(old) = fs::metadata(path) {
            if old.is_file() {
                file.set_permissions(old.permissions())?;
            }
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(e).with_context(|| format!("{flag}: writing {}", path.display()));
    }
    Ok(())
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

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("gpuslack-files-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn a_file_is_replaced_whole_keeping_its_permissions_and_no_temporary_is_left() {
        use std::os::unix::fs::PermissionsExt;
        let dir = dir("replace");
        let path = dir.join("profiles.toml");
        fs::write(&path, "old, and longer than the new").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");
        write_replacing("--out", &path, b"new").expect("written");
        assert_eq!(fs::read_to_string(&path).expect("read"), "new");
        let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let names: Vec<_> = fs::read_dir(&dir).expect("list").flatten().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn a_link_is_refused_and_what_it_points_at_is_untouched() {
        let dir = dir("link");
        let victim = dir.join("victim");
        fs::write(&victim, "precious").expect("write");
        let link = dir.join("report.html");
        std::os::unix::fs::symlink(&victim, &link).expect("symlink");
        let e = write_replacing("--report", &link, b"<html>").expect_err("refused");
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(fs::read_to_string(&victim).expect("read"), "precious");
        // Dangling: refused too, and nothing is created where it points.
        let dangling = dir.join("dangling");
        std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).expect("symlink");
        assert!(write_replacing("--out", &dangling, b"x").is_err());
        assert!(!dir.join("nowhere").exists());
    }
}
