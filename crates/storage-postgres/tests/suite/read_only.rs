//! The read-only open (`DRIVER.open_existing`, what `vvm-host status` and
//! `handover` use): a missing table or schema is `ttl_storage::NoStore`,
//! and nothing is created: no table, no schema.

use ttl_storage::{Key, NoStore, Ttl};

use super::{connect_url, unique, with_query};

/// Whether the relation or schema `name` exists (`regclass` or
/// `regnamespace`), asked on an ordinary connection.
async fn exists(kind: &str, name: &str) -> bool {
    let storage = connect_url(&with_query(&format!("table={}", unique("suite_probe")))).await;
    let client = storage.pool().get().await.unwrap();
    let row = client
        .query_one(&format!("SELECT to_{kind}($1) IS NOT NULL"), &[&name])
        .await
        .unwrap();
    row.get(0)
}

#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn open_existing_creates_no_table_or_schema() {
    let table = unique("suite_read_only");
    let schema = unique("suite_read_only_schema");
    for query in [
        format!("table={table}"),
        format!("table={table}&schema={schema}"),
    ] {
        let parsed = (storage_postgres::DRIVER.parse)(&with_query(&query)).unwrap();
        let err = (storage_postgres::DRIVER.open_existing)(&parsed)
            .await
            .err()
            .unwrap_or_else(|| panic!("{query}: opened a table that is not there"));
        assert!(NoStore::find(&*err).is_some(), "{query}: {err}");
    }
    assert!(!exists("regclass", &table).await, "the table was created");
    assert!(
        !exists("regnamespace", &schema).await,
        "the schema was created"
    );

    // Once a writer made it, the read-only open reads it.
    let parsed = (storage_postgres::DRIVER.parse)(&with_query(&format!("table={table}"))).unwrap();
    let key = Key::new("k").unwrap();
    let writer = (storage_postgres::DRIVER.open)(&parsed).await.unwrap();
    assert!(
        writer
            .insert_if_not_exists(&key, b"v", Ttl::from_secs(600).unwrap())
            .await
            .unwrap()
    );
    let reader = (storage_postgres::DRIVER.open_existing)(&parsed)
        .await
        .unwrap();
    assert_eq!(reader.get(&key).await.unwrap(), Some(b"v".to_vec()));
}
