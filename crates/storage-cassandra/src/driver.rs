//! This driver's descriptor, [`crate::DRIVER`] (its fence included).

use std::sync::Arc;

use ttl_storage::{BoxError, DriverConfig, DynTtlStorage};

use crate::{CassandraConfig, CassandraStorage};

impl DriverConfig for CassandraConfig {
    fn parse_url(url: &str) -> Result<Self, BoxError> {
        Ok(CassandraConfig::from_url(url)?)
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        let storage = CassandraStorage::connect(self).await?;
        Ok(Arc::new(storage) as DynTtlStorage)
    }

    async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
        let storage = CassandraStorage::connect_existing(self).await?;
        Ok(Arc::new(storage) as DynTtlStorage)
    }

    fn single_endpoint(&self) -> Option<String> {
        match self.contact_points() {
            [one] => Some(one.clone()),
            _ => None,
        }
    }

    fn with_endpoint(url: &str, addr: &str) -> Option<String> {
        // scheme://[userinfo@]host[:port]/keyspace?...: replace the host.
        let (scheme, rest) = url.split_once("://")?;
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let userinfo = authority
            .rsplit_once('@')
            .map(|(userinfo, _)| format!("{userinfo}@"))
            .unwrap_or_default();
        Some(format!("{scheme}://{userinfo}{addr}{tail}"))
    }
}

impl fence::FenceConfig for CassandraConfig {
    async fn open_fence(self, options: fence::OpenOptions) -> fence::Result<fence::DynFence> {
        crate::fence::open(self, &options).await
    }
}
