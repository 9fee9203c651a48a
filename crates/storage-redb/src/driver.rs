//! This driver's descriptor, [`crate::DRIVER`].

use std::sync::Arc;

use ttl_storage::{BoxError, DriverConfig, DynTtlStorage};

use crate::{RedbConfig, RedbMode, RedbStorage, SharedRedbStorage};

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
}
