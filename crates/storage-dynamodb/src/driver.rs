//! This driver's descriptor, [`crate::DRIVER`] (its fence included).

use std::sync::Arc;

use ttl_storage::{BoxError, DriverConfig, DynTtlStorage, NoStore};

use crate::{ConnectError, DynamoDbConfig, DynamoDbStorage};

impl DriverConfig for DynamoDbConfig {
    fn parse_url(url: &str) -> Result<Self, BoxError> {
        Ok(DynamoDbConfig::from_url(url)?)
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        let storage = DynamoDbStorage::connect(self).await?;
        Ok(Arc::new(storage) as DynTtlStorage)
    }

    async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
        match DynamoDbStorage::connect_existing(self).await {
            Ok(storage) => Ok(Arc::new(storage) as DynTtlStorage),
            Err(ConnectError::TableNotFound(table)) => {
                Err(NoStore::new(format!("table {table:?}")).into())
            }
            Err(err) => Err(err.into()),
        }
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

impl fence::FenceConfig for DynamoDbConfig {
    async fn open_fence(self, options: fence::OpenOptions) -> fence::Result<fence::DynFence> {
        crate::fence::open(self, &options).await
    }
}
