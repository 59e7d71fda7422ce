//! Files from the command line, opened safely: only regular files (a FIFO would block
//! forever, `/dev/zero` never ends), every read bounded, and each failure said as what it is
//! (a symlink loop, a directory, a device) with the path.

use std::fs::{File, Metadata};
use std::io::Read;
use std::path::Path;

use crate::outcome::Failure;

pub(crate) use stageplan::limits::MAX_TEXT_BYTES;

/// How `path` is (or is not) there: `None` when nothing is at that path, else its metadata
/// (symlinks followed) or the reason it cannot be had.
pub(crate) fn probe(path: &Path) -> Option<Result<Metadata, Failure>> {
    match std::fs::metadata(path) {
        Ok(meta) => Some(Ok(meta)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A dangling symlink is "there" as a link and missing as a file: say which.
            if std::fs::symlink_metadata(path).is_ok() {
                Some(Err(Failure(format!(
                    "`{}` is a symbolic link to a file that does not exist; point it at the file",
                    path.display()
                ))))
            } else {
                None
            }
        }
        Err(e) => Some(Err(failure(path, &e))),
    }
}

/// Opens a regular file for reading.
///
/// # Errors
/// A missing path, a symlink loop, a directory, a FIFO, socket or device, or no permission,
/// each named.
pub(crate) fn open(path: &Path) -> Result<(File, u64), Failure> {
    let meta = match probe(path) {
        None => return Err(Failure(format!("`{}` does not exist; check the path", path.display()))),
        Some(meta) => meta?,
    };
    regular(path, &meta)?;
    let file = File::open(path).map_err(|e| failure(path, &e))?;
    // The path may have been swapped between the check and the open: check what was opened.
    let opened = file.metadata().map_err(|e| failure(path, &e))?;
    regular(path, &opened)?;
    Ok((file, opened.len()))
}

/// The whole of a text file of at most [`MAX_TEXT_BYTES`], or standard input for `-`.
///
/// # Errors
/// As [`open`], and text that is too long or not UTF-8.
pub(crate) fn read_text(path: &Path) -> Result<String, Failure> {
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        std::io::stdin().take(MAX_TEXT_BYTES + 1).read_to_end(&mut bytes)
    } else {
        let (file, len) = open(path)?;
        if len > MAX_TEXT_BYTES {
            return Err(too_long(path));
        }
        file.take(MAX_TEXT_BYTES + 1).read_to_end(&mut bytes)
    };
    read.map_err(|e| failure(path, &e))?;
    if bytes.len() as u64 > MAX_TEXT_BYTES {
        return Err(too_long(path));
    }
    // A UTF-8 byte-order mark is how some editors start a file; it is not part of the JSON.
    let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
    String::from_utf8(text.to_vec()).map_err(|e| {
        Failure(format!(
            "`{}` is not UTF-8 text (invalid byte at offset {}); save it as UTF-8",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

fn too_long(path: &Path) -> Failure {
    Failure(format!(
        "`{}` is over {} MiB; a scenario, plan or config.json is far smaller: check the file",
        path.display(),
        MAX_TEXT_BYTES >> 20
    ))
}

/// A regular file, or an error naming what `path` is instead.
pub(crate) fn regular(path: &Path, meta: &Metadata) -> Result<(), Failure> {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(Failure(format!("`{}` is {what}; give a regular file", path.display())))
}

/// An I/O error as one line naming the path, with the usual causes said plainly.
pub(crate) fn failure(path: &Path, e: &std::io::Error) -> Failure {
    // ELOOP: std has no stable `ErrorKind` for it yet.
    const ELOOP: i32 = if cfg!(any(target_os = "macos", target_os = "ios", target_os = "freebsd")) { 62 } else { 40 };
    let shown = path.display();
    match e.kind() {
        _ if e.raw_os_error() == Some(ELOOP) => {
            Failure(format!("`{shown}` is a symbolic link loop; point the link at a file"))
        }
        std::io::ErrorKind::PermissionDenied => {
            Failure(format!("cannot read `{shown}`: permission denied; check its permissions"))
        }
        std::io::ErrorKind::NotFound => Failure(format!("`{shown}` does not exist; check the path")),
        _ => Failure(format!("cannot read `{shown}`: {e}")),
    }
}
