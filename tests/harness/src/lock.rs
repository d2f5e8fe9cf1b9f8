//! Locks between test processes. `cargo nextest` (the test command's runner)
//! runs every test in a process of its own, several at once, so what the
//! tests of one binary used to share through a `static` (a port handed out,
//! a subnet chosen, a template made once) must be shared through files.
//! `flock(2)` on a file of the temporary directory: the kernel releases it
//! when the holder exits, however it exits, so a killed test never leaves a
//! lock held.

use std::{fs::File, os::fd::AsRawFd, path::PathBuf};

/// An exclusive `flock(2)` on `leasehold-<name>-<uid>.lock` in the
/// temporary directory, held until dropped.
pub struct FileLock {
    /// Closing it releases the lock.
    _file: File,
}

impl FileLock {
    /// Blocks until this process holds the lock `name` (any process of
    /// this user taking the same name waits for it).
    pub fn acquire(name: &str) -> FileLock {
        let path = lock_path(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open the lock file {}: {e}", path.display()));
        loop {
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return FileLock { _file: file };
            }
            let error = std::io::Error::last_os_error();
            assert!(
                error.kind() == std::io::ErrorKind::Interrupted,
                "flock {}: {error}",
                path.display()
            );
        }
    }
}

/// Where the lock `name` lives: one per user, so that a root run and a
/// user's run on the same machine never contend for a file neither can
/// open.
fn lock_path(name: &str) -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    std::env::temp_dir().join(format!("leasehold-{name}-{uid}.lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a second open of the lock file could take it now.
    fn free(name: &str) -> bool {
        let file = File::open(lock_path(name)).unwrap();
        // SAFETY: flock on a descriptor this function owns.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
    }

    #[test]
    fn a_lock_is_held_until_dropped() {
        let name = format!("lock-test-{}", std::process::id());
        let held = FileLock::acquire(&name);
        assert!(!free(&name), "another holder could take a held lock");
        drop(held);
        assert!(free(&name), "a dropped lock stayed held");
        let _ = std::fs::remove_file(lock_path(&name));
    }
}
