//! This driver's descriptor, [`crate::DRIVER`] (its fence included).

use std::sync::Arc;

use ttl_storage::{BoxError, DriverConfig, DynTtlStorage};

use crate::{KubeConfig, KubeStorage};

impl DriverConfig for KubeConfig {
    fn parse_url(url: &str) -> Result<Self, BoxError> {
        Ok(KubeConfig::from_url(url)?)
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        let storage = KubeStorage::connect(self).await?;
        Ok(Arc::new(storage) as DynTtlStorage)
    }

    async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
        // Connecting writes nothing: Leases need no schema.
        self.open().await
    }

    fn single_endpoint(&self) -> Option<String> {
        // Only a URL that names its server (`server=`) has one address;
        // a kubeconfig's or the pod's is not in the URL.
        self.endpoint()
    }

    fn with_endpoint(url: &str, addr: &str) -> Option<String> {
        KubeConfig::with_server_addr(url, addr)
    }
}

impl fence::FenceConfig for KubeConfig {
    async fn open_fence(self, options: fence::OpenOptions) -> fence::Result<fence::DynFence> {
        crate::fence::open(self, &options).await
    }
}
