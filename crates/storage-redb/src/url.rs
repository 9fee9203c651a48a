//! The `redb://` URL form: which file, and whether several processes share it.

use std::path::{Path, PathBuf};

use percent_encoding::percent_decode_str;
use url::Url;

use crate::UrlError;

/// How a redb file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedbMode {
    /// [`SharedRedbStorage`](crate::SharedRedbStorage): the processes of
    /// one host share the file (the default).
    Shared,
    /// [`RedbStorage`](crate::RedbStorage): one process holds the file
    /// (faster: group commit without cross-process locks).
    Exclusive,
}

/// What a `redb://` URL selects: a file, and whether several processes
/// share it. Parse one with [`RedbConfig::from_url`]:
///
/// ```text
/// redb:///absolute/path/file.redb[?mode=shared|exclusive]
/// redb://relative/path/file.redb[?mode=...]
/// ```
///
/// The path is percent-decoded (`%20` is a space).
///
/// ```
/// use std::path::Path;
/// use storage_redb::{RedbMode, RedbConfig};
///
/// let url = RedbConfig::from_url("redb:///var/lib/app/leases%20a.redb")?;
/// assert_eq!(url.path(), Path::new("/var/lib/app/leases a.redb"));
/// assert_eq!(url.mode(), RedbMode::Shared);
/// let url = RedbConfig::from_url("redb://data/leases.redb?mode=exclusive")?;
/// assert_eq!(url.path(), Path::new("data/leases.redb"));
/// assert_eq!(url.mode(), RedbMode::Exclusive);
/// assert!(RedbConfig::from_url("redb:///x.redb?mode=fast").is_err());
/// # Ok::<(), storage_redb::UrlError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedbConfig {
    path: PathBuf,
    mode: RedbMode,
}

impl RedbConfig {
    /// The file at `path`, opened in `mode`.
    pub fn new(path: impl Into<PathBuf>, mode: RedbMode) -> RedbConfig {
        RedbConfig {
            path: path.into(),
            mode,
        }
    }

    /// Parses and validates a `redb://` URL.
    ///
    /// # Errors
    ///
    /// A [`UrlError`] saying what is wrong; nothing is opened.
    pub fn from_url(raw: &str) -> Result<RedbConfig, UrlError> {
        let url = Url::parse(raw).map_err(|_| UrlError::NotRedb)?;
        if url.scheme() != "redb" {
            return Err(UrlError::NotRedb);
        }
        if !url.username().is_empty()
            || url.password().is_some()
            || url.port().is_some()
            || url.fragment().is_some()
        {
            return Err(UrlError::Unexpected);
        }
        // `redb:///abs` has an empty host; `redb://rel/path` puts the first
        // segment of a relative path in the host.
        let host = url.host_str().unwrap_or_default();
        let encoded = format!("{host}{}", url.path());
        let decoded = percent_decode_str(&encoded)
            .decode_utf8()
            .map_err(|_| UrlError::NotUtf8)?;
        if decoded.is_empty() || decoded == "/" {
            return Err(UrlError::NoPath);
        }
        let mut mode = None;
        for (name, value) in url.query_pairs() {
            match (name.as_ref(), value.as_ref(), mode) {
                ("mode", "shared", None) => mode = Some(RedbMode::Shared),
                ("mode", "exclusive", None) => mode = Some(RedbMode::Exclusive),
                ("mode", other, _) => return Err(UrlError::BadMode(other.to_owned())),
                (other, _, _) => return Err(UrlError::UnknownOption(other.to_owned())),
            }
        }
        Ok(RedbConfig {
            path: PathBuf::from(decoded.into_owned()),
            mode: mode.unwrap_or(RedbMode::Shared),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Shared (several processes) or exclusive (one).
    pub fn mode(&self) -> RedbMode {
        self.mode
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let ok = |raw: &str| RedbConfig::from_url(raw).unwrap();
        assert_eq!(ok("redb:///tmp/a.redb").path(), Path::new("/tmp/a.redb"));
        assert_eq!(
            ok("redb:///tmp/a b.redb").path(),
            Path::new("/tmp/a b.redb")
        );
        assert_eq!(
            ok("redb:///tmp/a%20b.redb").path(),
            Path::new("/tmp/a b.redb")
        );
        assert_eq!(ok("redb://rel/a.redb").path(), Path::new("rel/a.redb"));
        assert_eq!(ok("redb://a.redb").path(), Path::new("a.redb"));
        assert_eq!(ok("redb:///x?mode=shared").mode(), RedbMode::Shared);
        assert_eq!(ok("redb:///x?mode=exclusive").mode(), RedbMode::Exclusive);
        for (bad, why) in [
            ("redb://", UrlError::NoPath),
            ("redb:///", UrlError::NoPath),
            ("file:///x", UrlError::NotRedb),
            ("/x", UrlError::NotRedb),
            ("redb://u:p@h/x", UrlError::Unexpected),
            ("redb:///x#f", UrlError::Unexpected),
            ("redb:///x?mode=fast", UrlError::BadMode("fast".into())),
            (
                "redb:///x?mode=shared&mode=exclusive",
                UrlError::BadMode("exclusive".into()),
            ),
            ("redb:///x?sync=no", UrlError::UnknownOption("sync".into())),
            ("redb:///%FF", UrlError::NotUtf8),
        ] {
            assert_eq!(RedbConfig::from_url(bad), Err(why), "{bad}");
        }
    }
}
