//! This driver's descriptors, [`crate::DRIVER`] and [`crate::FENCE`].

use std::sync::Arc;

use ttl_storage::{BoxError, DriverConfig, DynTtlStorage};

use crate::{DynamoConfig, DynamoStorage};

impl DriverConfig for DynamoConfig {
    fn parse_url(url: &str) -> Result<Self, BoxError> {
        Ok(DynamoConfig::from_url(url)?)
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        let storage = DynamoStorage::connect(self).await?;
        Ok(Arc::new(storage) as DynTtlStorage)
    }

    fn single_endpoint(&self) -> Option<String> {
        let endpoint = url::Url::parse(self.endpoint()?).ok()?;
        Some(format!(
            "{}:{}",
            endpoint.host_str()?,
            endpoint.port_or_known_default()?
        ))
    }

    fn with_endpoint(raw: &str, addr: &str) -> Option<String> {
        let mut url = url::Url::parse(raw).ok()?;
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                if name == "endpoint" {
                    let scheme = value.split_once("://").map_or("http", |(s, _)| s);
                    (name.into_owned(), format!("{scheme}://{addr}"))
                } else {
                    (name.into_owned(), value.into_owned())
                }
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
        Some(url.to_string())
    }
}

impl fence::FenceConfig for DynamoConfig {
    async fn open_fence(self, options: fence::OpenOptions) -> fence::Result<fence::DynFence> {
        crate::fence::open(self, &options).await
    }
}
