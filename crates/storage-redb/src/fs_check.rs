//! Which file systems keep OS file locks reliable between processes.
//!
//! The shared mode serialises processes with an exclusive `flock(2)` on a
//! lock file. On a local file system that is exact; on network and
//! user-space file systems locks may be emulated, advisory per client, or
//! silently ignored, and two processes could then both write. Such file
//! systems are refused unless explicitly allowed.

use std::path::Path;

/// A file system on which file locks between processes are not reliable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unreliable {
    /// The file system's name.
    pub(crate) name: &'static str,
}

/// Magic numbers (`statfs.f_type`) of file systems whose locks are not
/// reliable between processes, from `linux/magic.h` and the file systems'
/// sources.
const UNRELIABLE: &[(u32, &str)] = &[
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x0102_1997, "9P (v9fs)"),
    (0x00C3_6400, "CephFS"),
    (0x0116_1970, "GFS2"),
    (0x0BD0_0BD0, "Lustre"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "AFS (kAFS)"),
    (0x7375_7245, "Coda"),
    (0x564C, "NCP"),
    (0x6573_5546, "FUSE (e.g. sshfs, s3fs)"),
];

/// The unreliable file system with magic number `magic`, if it is one.
pub(crate) fn classify(magic: u32) -> Option<Unreliable> {
    UNRELIABLE
        .iter()
        .find(|(known, _)| *known == magic)
        .map(|(_, name)| Unreliable { name })
}

/// Checks the file system holding `dir` (an existing directory).
#[cfg(target_os = "linux")]
pub(crate) fn check(dir: &Path) -> std::io::Result<Option<Unreliable>> {
    let stat = nix::sys::statfs::statfs(dir).map_err(std::io::Error::from)?;
    // `f_type` is a C long; the magic numbers are 32-bit.
    #[allow(clippy::cast_sign_loss, clippy::cast_possible_truncation)]
    let magic = (stat.filesystem_type().0 as u64 & 0xFFFF_FFFF) as u32;
    Ok(classify(magic))
}

/// Elsewhere the file system type is not checked.
#[cfg(not(target_os = "linux"))]
pub(crate) fn check(_dir: &Path) -> std::io::Result<Option<Unreliable>> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_file_systems_are_unreliable() {
        assert_eq!(classify(0x6969).map(|u| u.name), Some("NFS"));
        assert_eq!(classify(0xFF53_4D42).map(|u| u.name), Some("CIFS"));
        // ext4, tmpfs, xfs, btrfs are local.
        for local in [0xEF53, 0x0102_1994, 0x5846_5342, 0x9123_683E] {
            assert_eq!(classify(local), None);
        }
    }

    #[test]
    fn the_temp_dir_is_local() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check(dir.path()).unwrap(), None);
    }
}
