//! This driver's descriptor, [`crate::DRIVER`] (its fence included).

use std::sync::Arc;

use ttl_storage::{BoxError, DriverConfig, DynTtlStorage};

use crate::{PostgresConfig, PostgresStorage};

impl DriverConfig for PostgresConfig {
    fn parse_url(url: &str) -> Result<Self, BoxError> {
        Ok(PostgresConfig::from_url(url)?)
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        let storage = PostgresStorage::connect(self).await?;
        Ok(Arc::new(storage) as DynTtlStorage)
    }

    async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
        let storage = PostgresStorage::connect_existing(self).await?;
        Ok(Arc::new(storage) as DynTtlStorage)
    }

    fn single_endpoint(&self) -> Option<String> {
        // Several servers: not one address.
        self.other_hosts
            .is_empty()
            .then(|| format!("{}:{}", self.host, self.port))
    }

    fn with_endpoint(url: &str, addr: &str) -> Option<String> {
        ttl_storage::kit::url::replace_host_and_port(url, addr)
    }
}

impl fence::FenceConfig for PostgresConfig {
    async fn open_fence(self, options: fence::OpenOptions) -> fence::Result<fence::DynFence> {
        crate::fence::open(self, &options).await
    }
}
