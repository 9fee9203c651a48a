//! The lock and where it lives, as every subcommand names it
//! ([`StoreArgs`]), and opening an existing store without creating one.

use storage_url::StorageUrl;
use ttl_storage::DynTtlStorage;
use vvm_orch::{MAX_CLUSTER_SIZE, VvmConfig};

/// The options `vvm-host run`, `status` and `handover` share: the lock's name,
/// the storage and the keys.
#[derive(Debug, clap::Args)]
pub(crate) struct StoreArgs {
    /// Storage URL (see "Storage URLs" in `vvm-host run --help`). Default: a
    /// redb file under $XDG_DATA_HOME/vvm-host/ (~/.local/share).
    #[arg(long, env = "VVM_HOST_STORAGE", value_name = "URL")]
    pub(crate) storage: Option<StorageUrl>,

    /// Number of nodes that may hold the lock at once (keys NAME/1..=N are
    /// tried in turn). Every node of one lock must use the same N.
    #[arg(
        long,
        env = "VVM_HOST_CLUSTER_SIZE",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CLUSTER_SIZE)),
    )]
    pub(crate) cluster_size: u32,

    /// Expert override of the keys NAME gives (`PREFIX1..=N` instead of
    /// `NAME/1..=N`), e.g. `vvm/leader/` to keep the keys of vvm-host 0.1,
    /// whose default that was.
    #[arg(long, env = "VVM_HOST_KEY_PREFIX", value_name = "PREFIX")]
    pub(crate) key_prefix: Option<String>,

    /// The lock's name: nodes that run with the same NAME on one store take
    /// turns; different names are independent locks.
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub(crate) name: String,
}

impl StoreArgs {
    /// The key prefix: `--key-prefix`, else `NAME/`.
    pub(crate) fn key_prefix(&self) -> String {
        self.key_prefix
            .clone()
            .unwrap_or_else(|| format!("{}/", self.name))
    }

    /// A configuration naming these keys (for `address`).
    pub(crate) fn config(&self, address: String) -> VvmConfig {
        let mut config = VvmConfig::new(address);
        config.cluster_size = self.cluster_size;
        config.key_prefix = self.key_prefix();
        config
    }
}

/// A lock name: every key of the layout (`vvm_orch::keys`) for the keys
/// `NAME/1..=N` must be a valid key up to the largest N; `__` starts the
/// names reserved for the library's own records.
fn parse_name(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("the lock name is empty".to_owned());
    }
    if text.starts_with("__") || text.starts_with('-') {
        return Err(format!(
            "{text:?}: a lock name may not start with `__` or `-`"
        ));
    }
    vvm_orch::keys::check_prefix(&format!("{text}/"), MAX_CLUSTER_SIZE)
        .map(|()| text.to_owned())
        .map_err(|err| format!("{text:?} is not a valid lock name: {err}"))
}

/// Why a read-only command (status, handover) read nothing.
#[derive(Debug, thiserror::Error)]
#[error("no store at {0}: nothing was created (start `vvm-host run` with this --storage first)")]
pub(crate) struct NoStore(String);

/// Opens the store for reading only: a redb URL whose file does not exist
/// is [`NoStore`] (opening it would create it).
pub(crate) async fn open_existing(store: &StoreArgs) -> anyhow::Result<DynTtlStorage> {
    let url = match &store.storage {
        Some(url) => url.clone(),
        None => crate::default_storage::default_url()?,
    };
    // Read only: opening a redb URL would create the file.
    if let Some(file) = url.local_file()
        && !file.exists()
    {
        return Err(NoStore(file.display().to_string()).into());
    }
    Ok(url.open().await?)
}
