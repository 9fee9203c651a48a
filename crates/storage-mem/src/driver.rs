//! This driver's descriptor, [`crate::DRIVER`].

use std::sync::Arc;

use ttl_storage::{BoxError, DriverConfig, DynTtlStorage};

use crate::{MemConfig, MemStorage};

impl DriverConfig for MemConfig {
    fn parse_url(url: &str) -> Result<Self, BoxError> {
        Ok(MemConfig::from_url(url)?)
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        let storage = MemStorage::connect(self).await?;
        Ok(Arc::new(storage) as DynTtlStorage)
    }

    async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
        // Nothing outlives the process: an empty store is the one there is.
        self.open().await
    }
}
