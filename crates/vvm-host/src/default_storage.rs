//! The storage `vvm-host` uses without `--storage`.

use std::{env, path::PathBuf};

use storage_url::StorageUrl;

/// Name of the redb file in the default data directory.
const DEFAULT_FILE: &str = "vvm-host.redb";

/// No home for the default storage.
#[derive(Debug, thiserror::Error)]
#[error("no default data directory: set XDG_DATA_HOME or HOME, or pass --storage")]
pub(crate) struct NoDataDir;

/// A redb file in the user's data directory
/// (`$XDG_DATA_HOME/vvm-host/vvm-host.redb`, else `~/.local/share/...`).
pub(crate) fn default_url() -> Result<StorageUrl, NoDataDir> {
    let base = env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".local").join("share"))
        })
        .ok_or(NoDataDir)?;
    Ok(StorageUrl::redb(base.join("vvm-host").join(DEFAULT_FILE)))
}
