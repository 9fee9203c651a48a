//! This driver's descriptor, [`crate::DRIVER`] (its fence included).

use std::sync::Arc;

use ttl_storage::{BoxError, DriverConfig, DynTtlStorage};

use crate::{EtcdConfig, EtcdStorage};

impl DriverConfig for EtcdConfig {
    fn parse_url(url: &str) -> Result<Self, BoxError> {
        Ok(EtcdConfig::from_url(url)?)
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        let storage = EtcdStorage::connect(self).await?;
        Ok(Arc::new(storage) as DynTtlStorage)
    }

    async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
        // Connecting writes nothing: there is no schema to create.
        self.open().await
    }

    fn single_endpoint(&self) -> Option<String> {
        // More endpoints (`endpoint=` parameters): not one address.
        match self.endpoints() {
            [one] => Some(one.clone()),
            _ => None,
        }
    }

    fn with_endpoint(url: &str, addr: &str) -> Option<String> {
        ttl_storage::kit::url::replace_host_and_port(url, addr)
    }
}

impl fence::FenceConfig for EtcdConfig {
    async fn open_fence(self, options: fence::OpenOptions) -> fence::Result<fence::DynFence> {
        crate::fence::open(self, &options).await
    }
}
