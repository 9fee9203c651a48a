//! This driver's descriptor, [`crate::DRIVER`].

use std::sync::Arc;

use ttl_storage::{BoxError, DriverConfig, DynTtlStorage, NoStore};

use crate::{OpenError, RedbConfig, RedbMode, RedbStorage, SharedRedbStorage};

impl DriverConfig for RedbConfig {
    fn parse_url(url: &str) -> Result<Self, BoxError> {
        Ok(RedbConfig::from_url(url)?)
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        let storage: DynTtlStorage = match self.mode() {
            RedbMode::Shared => Arc::new(SharedRedbStorage::connect(self).await?),
            RedbMode::Exclusive => Arc::new(RedbStorage::connect(self).await?),
        };
        Ok(storage)
    }

    async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
        let opened: Result<DynTtlStorage, OpenError> = match self.mode() {
            RedbMode::Shared => SharedRedbStorage::builder()
                .existing_only()
                .open(self.path())
                .await
                .map(|storage| Arc::new(storage) as DynTtlStorage),
            RedbMode::Exclusive => RedbStorage::builder()
                .existing_only()
                .open(self.path())
                .await
                .map(|storage| Arc::new(storage) as DynTtlStorage),
        };
        opened.map_err(|err| match err {
            OpenError::Missing { path } => {
                NoStore::new(format!("storage file {}", path.display())).into()
            }
            other => other.into(),
        })
    }
}
