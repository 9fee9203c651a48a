//! The `redb://` URL form: which file, and whether several processes share it.

use std::path::{Path, PathBuf};

use ttl_storage::kit::{self, UrlError};

use crate::ConfigError;

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
/// ```
///
/// The path is percent-decoded (`%20` is a space). It must be absolute:
/// `redb://data/x.redb` (two slashes) would name a file relative to each
/// process's current directory, so two nodes started from different
/// directories would each get a file of their own and both lead; it is
/// refused, the message giving the absolute form.
///
/// ```
/// use std::path::Path;
/// use storage_redb::{RedbMode, RedbConfig};
///
/// let url = RedbConfig::from_url("redb:///var/lib/app/leases%20a.redb")?;
/// assert_eq!(url.path(), Path::new("/var/lib/app/leases a.redb"));
/// assert_eq!(url.mode(), RedbMode::Shared);
/// let url = RedbConfig::from_url("redb:///data/leases.redb?mode=exclusive")?;
/// assert_eq!(url.path(), Path::new("/data/leases.redb"));
/// assert_eq!(url.mode(), RedbMode::Exclusive);
/// assert!(RedbConfig::from_url("redb://data/leases.redb").is_err());
/// assert!(RedbConfig::from_url("redb:///x.redb?mode=fast").is_err());
/// # Ok::<(), storage_redb::ConfigError>(())
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
    /// A [`ConfigError`] saying what is wrong; nothing is opened.
    pub fn from_url(raw: &str) -> Result<RedbConfig, ConfigError> {
        let url = kit::url::parse(raw)?;
        if url.scheme() != "redb" {
            return Err(UrlError::BadScheme {
                scheme: url.scheme().to_owned(),
                expected: "redb://",
            }
            .into());
        }
        if !url.username().is_empty()
            || url.password().is_some()
            || url.port().is_some()
            || url.fragment().is_some()
        {
            return Err(ConfigError::Unexpected);
        }
        // `redb:///abs` has an empty host; `redb://rel/path` puts the first
        // segment of a relative path in the host: refused.
        let host = url.host_str().unwrap_or_default();
        let decoded = kit::url::decode(&format!("{host}{}", url.path()), "path")?;
        if decoded.is_empty() || decoded == "/" {
            return Err(ConfigError::NoPath);
        }
        if !host.is_empty() {
            let absolute = std::env::current_dir()
                .map(|dir| dir.join(&decoded).display().to_string())
                .unwrap_or_else(|_| format!("/path/to/{decoded}"));
            return Err(ConfigError::Relative {
                path: decoded,
                absolute: format!("redb://{absolute}"),
            });
        }
        let mut mode = RedbMode::Shared;
        for (name, value) in kit::url::params(&url, &[])? {
            match (name.as_str(), value.as_str()) {
                ("mode", "shared") => mode = RedbMode::Shared,
                ("mode", "exclusive") => mode = RedbMode::Exclusive,
                ("mode", other) => return Err(ConfigError::BadMode(other.to_owned())),
                (other, _) => return Err(UrlError::UnknownParameter(other.to_owned()).into()),
            }
        }
        Ok(RedbConfig {
            path: PathBuf::from(decoded),
            mode,
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
        for relative in ["redb://rel/a.redb", "redb://a.redb", "redb://tmp/x.redb"] {
            let err = RedbConfig::from_url(relative).unwrap_err();
            assert!(matches!(err, ConfigError::Relative { .. }), "{relative}");
            assert!(err.to_string().contains("redb:///"), "{err}");
        }
        assert_eq!(ok("redb:///x?mode=shared").mode(), RedbMode::Shared);
        assert_eq!(ok("redb:///x?mode=exclusive").mode(), RedbMode::Exclusive);
        let url = |err: UrlError| ConfigError::Url(err);
        for (bad, why) in [
            ("redb://", ConfigError::NoPath),
            ("redb:///", ConfigError::NoPath),
            (
                "file:///x",
                url(UrlError::BadScheme {
                    scheme: "file".into(),
                    expected: "redb://",
                }),
            ),
            (
                "/x",
                url(UrlError::NotAUrl("relative URL without a base".into())),
            ),
            ("redb://u:p@h/x", ConfigError::Unexpected),
            ("redb:///x#f", ConfigError::Unexpected),
            ("redb:///x?mode=fast", ConfigError::BadMode("fast".into())),
            (
                "redb:///x?mode=shared&mode=exclusive",
                url(UrlError::DuplicateParameter("mode".into())),
            ),
            (
                "redb:///x?sync=no",
                url(UrlError::UnknownParameter("sync".into())),
            ),
            ("redb:///%FF", url(UrlError::BadPercentEncoding("path"))),
        ] {
            assert_eq!(RedbConfig::from_url(bad), Err(why), "{bad}");
        }
    }
}
