//! The driver descriptor: a URL is parsed once on its way to `connect`,
//! and a configuration opens only with its own driver.

#![allow(clippy::unwrap_used)]

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use ttl_storage::{
    BoxError, Driver, DriverConfig, DynTtlStorage, ErrorKind, NoStore, ParsedUrl, StorageError,
};

static PARSES: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone, PartialEq)]
struct Counted(String);

impl DriverConfig for Counted {
    fn parse_url(url: &str) -> Result<Self, BoxError> {
        PARSES.fetch_add(1, Ordering::SeqCst);
        let addr = url.strip_prefix("counted://").ok_or("not counted://")?;
        Ok(Counted(addr.to_owned()))
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        Ok(Arc::new(storage_mem::MemStorage::new()) as DynTtlStorage)
    }

    async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
        self.open().await
    }

    fn single_endpoint(&self) -> Option<String> {
        Some(self.0.clone())
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Other;

impl DriverConfig for Other {
    fn parse_url(_: &str) -> Result<Self, BoxError> {
        Ok(Other)
    }

    async fn open(self) -> Result<DynTtlStorage, BoxError> {
        Err("never".into())
    }

    async fn open_existing(self) -> Result<DynTtlStorage, BoxError> {
        // As a driver whose store is missing says it: inside its own error.
        Err(
            StorageError::with_source(ErrorKind::Permanent, "opening", NoStore::new("table t"))
                .into(),
        )
    }
}

const COUNTED: Driver = Driver::new::<Counted>("counted", &["counted"], "counted://", None);
const OTHER: Driver = Driver::new::<Other>("other", &["other"], "other://", Some(1));

#[tokio::test]
async fn a_url_is_parsed_once_on_its_way_to_connect() {
    let parsed = (COUNTED.parse)("counted://h:1").unwrap();
    assert_eq!(PARSES.load(Ordering::SeqCst), 1);
    assert_eq!((COUNTED.endpoint)(&parsed).as_deref(), Some("h:1"));
    let _storage = (COUNTED.open)(&parsed).await.unwrap();
    let _again = (COUNTED.open)(&parsed.clone()).await.unwrap();
    assert_eq!(PARSES.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_configuration_opens_only_with_its_own_driver() {
    let parsed = (OTHER.parse)("other://x").unwrap();
    let err = (COUNTED.open)(&parsed).await.err().unwrap();
    assert!(err.to_string().contains("cannot be opened"), "{err}");
    assert_eq!((COUNTED.endpoint)(&parsed), None);
    assert_ne!(parsed, ParsedUrl::from_config(Counted("x".to_owned())));
    assert_eq!(parsed, (OTHER.parse)("other://y").unwrap());
    assert!(COUNTED.answers("counted") && !COUNTED.answers("other"));
    assert_eq!((COUNTED.with_endpoint)("counted://a", "b:1"), None);
}

#[tokio::test]
async fn a_read_only_open_says_what_is_missing() {
    let parsed = (OTHER.parse)("other://x").unwrap();
    let err = (OTHER.open_existing)(&parsed).await.err().unwrap();
    assert_eq!(NoStore::find(&*err), Some(&NoStore::new("table t")));
    // Another driver's configuration is refused, never opened.
    let err = (COUNTED.open_existing)(&parsed).await.err().unwrap();
    assert!(err.to_string().contains("cannot be opened"), "{err}");
    assert_eq!(NoStore::find(&*err), None);
    // Neither declares a fence.
    assert!(COUNTED.open_fence.is_none() && OTHER.open_fence.is_none());
}
