//! Token files: one bearer token in a file of its own, for the CLI (`--token-file`,
//! `GANTRY_TOKEN_FILE`) and for `gantry dev`, which makes one for whoever starts it.
//!
//! `gantry dev` used to leave its REST API open on loopback, and everything that can reach
//! loopback — the containers it runs included — could submit, kill and read any application.
//! Now it keeps a random token in `<data dir>/cli-token` (mode 0600, owned by the person who
//! started it: `SUDO_UID` under sudo), gives the scheduler a tokens file naming it, and the CLI
//! finds it by itself: without `--token`/`GANTRY_TOKEN` or a token file, a CLI talking to a
//! loopback scheduler reads `./gantry-dev/cli-token` (the default data directory, relative to
//! where `gantry dev` was started) when it is there and readable. A container runs as another
//! user and cannot read it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `gantry dev`'s default data directory (relative to where it runs).
pub const DEV_DATA_DIR: &str = "gantry-dev";
/// The CLI's token inside `gantry dev`'s data directory.
pub const CLI_TOKEN: &str = "cli-token";

/// Reads a token file: one token (surrounding white space ignored), 16 to 512 printable ASCII
/// characters without spaces.
pub fn read(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("token file {}: {e}", path.display()))?;
    if meta.len() > 4096 {
        return Err(format!("token file {}: larger than 4 KiB", path.display()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("token file {}: {e}", path.display()))?;
    let token = text.trim();
    let (min, max) = (gantry_scheduler::auth::MIN_TOKEN_BYTES, gantry_scheduler::auth::MAX_TOKEN_BYTES);
    if token.len() < min || token.len() > max || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "token file {}: the token must be {min} to {max} printable characters without spaces",
            path.display()
        ));
    }
    Ok(token.to_owned())
}

/// The dev token file the CLI uses by itself for `scheduler` (its URL), if any: only for a
/// loopback scheduler — a token of this machine's `gantry dev` is never sent elsewhere — and
/// only if `./gantry-dev/cli-token` exists.
pub fn dev_default(scheduler: &str) -> Option<PathBuf> {
    dev_default_in(Path::new(""), scheduler)
}

/// [`dev_default`] with `gantry-dev` looked for in `base` rather than the working directory.
pub fn dev_default_in(base: &Path, scheduler: &str) -> Option<PathBuf> {
    let url = if scheduler.contains("://") { scheduler.to_owned() } else { format!("http://{scheduler}") };
    let uri: hyper::Uri = url.trim().parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let path = base.join(DEV_DATA_DIR).join(CLI_TOKEN);
    (loopback && path.is_file()).then_some(path)
}

/// A random token: 256 bits as 64 lowercase hex digits.
pub fn random_token() -> String {
    rand::random::<[u8; 32]>().iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `contents` to `path` with mode 0600, replacing what is there, owned by `owner` (uid,
/// gid) if given. Written under a temporary name and renamed, so a reader never sees half of it
/// and the mode is right from the first byte.
pub fn write_private(path: &Path, contents: &str, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    let temp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        f.write_all(contents.as_bytes())?;
        f.sync_all()?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
        }
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn token_files_are_private_and_checked_when_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t");
        let token = random_token();
        assert_eq!(token.len(), 64);
        write_private(&path, &format!("{token}\n"), None).expect("write");
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        assert_eq!(read(&path), Ok(token));
        for bad in ["short", "has a space in the middle of it", ""] {
            std::fs::write(&path, bad).expect("write");
            let err = read(&path).expect_err(bad);
            assert!(err.contains("printable"), "{err}");
        }
        assert!(read(&dir.path().join("absent")).is_err());
    }

    #[test]
    fn the_dev_token_is_only_for_a_loopback_scheduler() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(dev_default_in(dir.path(), "http://127.0.0.1:8088"), None, "no gantry dev here");
        std::fs::create_dir(dir.path().join(DEV_DATA_DIR)).expect("mkdir");
        let path = dir.path().join(DEV_DATA_DIR).join(CLI_TOKEN);
        write_private(&path, &random_token(), None).expect("write");
        for local in ["http://127.0.0.1:8088", "127.0.0.1:9", "http://localhost:8088", "http://[::1]:8088"] {
            assert_eq!(dev_default_in(dir.path(), local), Some(path.clone()), "{local}");
        }
        for remote in ["http://10.0.0.1:8088", "https://sched.example:8088", "sched:1", "not a url"] {
            assert_eq!(dev_default_in(dir.path(), remote), None, "{remote}");
        }
    }
}
