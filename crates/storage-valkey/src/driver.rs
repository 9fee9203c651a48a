//! This driver's descriptor, [`crate::DRIVER`] (its fence included).

use std::sync::Arc;

use ttl_storage::{BoxError, DriverConfig, DynTtlStorage};

use crate::{ValkeyConfig, ValkeyStorage};

impl DriverConfig for ValkeyConfig {
    fn parse_url(url: &str) -> Result<Self, BoxError> {
        Ok(ValkeyConfig::from_url(url)?)
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        let storage = ValkeyStorage::connect(self).await?;
        Ok(Arc::new(storage) as DynTtlStorage)
    }

    async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
        // Connecting writes nothing: there is no schema to create.
        self.open().await
    }

    fn single_endpoint(&self) -> Option<String> {
        // Sentinels name the primary: no one address to proxy.
        match self.sentinel {
            Some(_) => None,
            None => Some(format!("{}:{}", self.host, self.port)),
        }
    }

    fn with_endpoint(url: &str, addr: &str) -> Option<String> {
        ttl_storage::kit::url::replace_host_and_port(url, addr)
    }
}

impl fence::FenceConfig for ValkeyConfig {
    async fn open_fence(self, options: fence::OpenOptions) -> fence::Result<fence::DynFence> {
        crate::fence::open(self, &options).await
    }
}
