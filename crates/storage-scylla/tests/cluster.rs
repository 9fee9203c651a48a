//! Cases for a multi-node cluster named by `SCYLLA_URI` (run by
//! `cargo xtask test-drivers --engine cassandra-3`, on three nodes and again
//! with one of them killed). They pass on a single node too.
//!
//! ```text
//! SCYLLA_URI='scylla://10.0.0.1,10.0.0.2,10.0.0.3/ttl_suite?replication=simple:3&create_schema=true' \
//!     cargo test -p storage-scylla --test cluster -- --ignored
//! ```

use std::sync::Arc;

use storage_scylla::ScyllaStorage;
use ttl_storage::{Key, Ttl, TtlStorage};

fn uri() -> String {
    std::env::var("SCYLLA_URI").unwrap_or_else(|_| {
        panic!(
            "SCYLLA_URI is not set: run `cargo xtask test-drivers --engine cassandra-3`, or set \
             SCYLLA_URI=scylla://h1,h2,h3/keyspace?replication=simple:3&create_schema=true"
        )
    })
}

/// `(hosts, query)` of `SCYLLA_URI`: `scylla://<hosts>/<keyspace>?<query>`.
fn parts(uri: &str) -> (Vec<String>, String) {
    let rest = uri
        .strip_prefix("scylla://")
        .or_else(|| uri.strip_prefix("cassandra://"))
        .unwrap_or_else(|| panic!("SCYLLA_URI {uri:?}: not scylla://"));
    let (authority, rest) = rest.split_once('/').unwrap_or((rest, ""));
    assert!(
        !authority.contains('@'),
        "this test does not handle credentials in SCYLLA_URI"
    );
    let query = rest.split_once('?').map(|(_, q)| q).unwrap_or("");
    let hosts = authority.split(',').map(str::to_string).collect();
    (hosts, query.to_string())
}

/// Three storages connect at once with `create_schema=true` on a keyspace
/// nobody created yet, each with a different node first in its contact
/// points, so their schema statements run on different coordinators. All
/// must connect and then work: no table created twice under two ids
/// (which fails every later write with INCOMPATIBLE_SCHEMA).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers --engine cassandra-3`"]
async fn concurrent_create_schema_on_a_fresh_keyspace() {
    let (hosts, query) = parts(&uri());
    for round in 0..3 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let keyspace = format!("schema_race_{nanos}_{round}");
        let mut tasks = Vec::new();
        for i in 0..3 {
            let mut rotated = hosts.clone();
            rotated.rotate_left(i % hosts.len());
            let url = format!("scylla://{}/{keyspace}?{query}", rotated.join(","));
            assert!(url.contains("create_schema=true"), "{url}");
            tasks.push(tokio::spawn(async move {
                let storage = ScyllaStorage::from_url(&url)
                    .await
                    .unwrap_or_else(|err| panic!("connecting {url}: {err:?}"));
                let key = Key::new(format!("schema-race/{i}")).unwrap();
                let ttl = Ttl::from_secs(60).unwrap();
                let me = format!("instance-{i}").into_bytes();
                assert!(
                    storage
                        .insert_if_not_exists(&key, &me, ttl)
                        .await
                        .unwrap_or_else(|err| panic!("instance {i} insert: {err:?}"))
                );
                assert_eq!(storage.get(&key).await.unwrap(), Some(me.clone()));
                assert!(storage.compare_and_delete(&key, &me).await.unwrap());
                Arc::new(storage)
            }));
        }
        let mut storages = Vec::new();
        for task in tasks {
            storages.push(task.await.unwrap());
        }
        // Each sees what the others write.
        let key = Key::new("schema-race/shared").unwrap();
        let ttl = Ttl::from_secs(60).unwrap();
        assert!(
            storages[0]
                .insert_if_not_exists(&key, b"zero", ttl)
                .await
                .unwrap()
        );
        for s in &storages[1..] {
            assert_eq!(s.get(&key).await.unwrap(), Some(b"zero".to_vec()));
            assert!(!s.insert_if_not_exists(&key, b"other", ttl).await.unwrap());
        }
        let table = storages[0].config().table().to_string();
        assert_one_table_id(&hosts, &keyspace, &table).await;
    }
}

/// Every live node knows `keyspace.table` under one and the same id.
#[allow(clippy::unwrap_used)] // test helper: a failure is the test failing
async fn assert_one_table_id(hosts: &[String], keyspace: &str, table: &str) {
    use scylla::{
        client::session_builder::SessionBuilder,
        policies::load_balancing::{NodeIdentifier, SingleTargetLoadBalancingPolicy},
        statement::unprepared::Statement,
        value::Row,
    };
    let session = SessionBuilder::new()
        .known_nodes(hosts)
        .build()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for node in session.get_cluster_state().get_nodes_info() {
        let mut statement = Statement::new(
            "SELECT id FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?",
        );
        statement.set_load_balancing_policy(Some(SingleTargetLoadBalancingPolicy::new(
            NodeIdentifier::Node(node.clone()),
            None,
        )));
        let Ok(result) = session.query_unpaged(statement, (keyspace, table)).await else {
            continue; // a node that is down
        };
        let rows = result.into_rows_result().unwrap();
        let ids_here: Vec<String> = rows
            .rows::<Row>()
            .unwrap()
            .map(|row| format!("{:?}", row.unwrap().columns))
            .collect();
        assert_eq!(ids_here.len(), 1, "node {}: {ids_here:?}", node.address);
        ids.push((node.address.to_string(), ids_here[0].clone()));
    }
    assert!(ids.len() >= 2, "fewer than two nodes answered: {ids:?}");
    assert!(
        ids.iter().all(|(_, id)| *id == ids[0].1),
        "{keyspace}.{table} has several ids: {ids:?}"
    );
}
