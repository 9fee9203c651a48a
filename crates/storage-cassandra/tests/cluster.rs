//! Cases for a multi-node cluster named by `SCYLLA_URI` (run by
//! `cargo xtask test-drivers --engine cassandra-3`, on three nodes and again
//! with one of them killed). They pass on a single node too.
//!
//! ```text
//! SCYLLA_URI='scylla://10.0.0.1,10.0.0.2,10.0.0.3/ttl_suite?replication=simple:3&create_schema=true' \
//!     cargo test -p storage-cassandra --test cluster -- --ignored
//! ```

use storage_cassandra::CassandraStorage;
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

/// Set in a child process of [`three_processes_create_schema_at_once`]:
/// the URL it connects with.
const CHILD_URL: &str = "SCHEMA_RACE_CHILD_URL";
/// Set in a child process: its instance number.
const CHILD_INSTANCE: &str = "SCHEMA_RACE_CHILD_INSTANCE";
/// Set in a child process: when to connect (ms since the epoch), the same
/// instant for all three, so their schema statements really race.
const CHILD_START_MS: &str = "SCHEMA_RACE_CHILD_START_MS";

#[allow(clippy::unwrap_used)] // test helper: a clock before 1970 is the test failing
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Three OS processes (this test binary re-executing this very test, with
/// [`CHILD_URL`] set) start at the same instant with `create_schema=true`
/// on a keyspace nobody created yet, each with a different node first in
/// its contact points, so their schema statements run on different
/// coordinators, as three `vvm-host` processes starting together would.
/// All must connect and then work, and every live node must know the
/// table under one id (a table created twice under two ids fails every
/// later write with INCOMPATIBLE_SCHEMA). Two rounds, two fresh keyspaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers --engine cassandra-3`"]
async fn three_processes_create_schema_at_once() {
    if let Ok(url) = std::env::var(CHILD_URL) {
        return child(&url).await;
    }
    let (hosts, query) = parts(&uri());
    assert!(query.contains("create_schema=true"), "{query}");
    let exe = std::env::current_exe().unwrap();
    for round in 0..2 {
        let keyspace = format!("schema_race_{}_{round}", now_ms());
        // Far enough ahead that all three processes are up and waiting.
        let start_ms = now_ms() + 1500;
        let mut children = Vec::new();
        for i in 0..3 {
            let mut rotated = hosts.clone();
            rotated.rotate_left(i % hosts.len());
            let url = format!("scylla://{}/{keyspace}?{query}", rotated.join(","));
            let child = tokio::process::Command::new(&exe)
                .args(["--exact", "three_processes_create_schema_at_once"])
                .args(["--ignored", "--nocapture", "--test-threads", "1"])
                .env(CHILD_URL, &url)
                .env(CHILD_INSTANCE, i.to_string())
                .env(CHILD_START_MS, start_ms.to_string())
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .output();
            children.push(tokio::spawn(child));
        }
        for (i, child) in children.into_iter().enumerate() {
            let output = child.await.unwrap().unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success() && stdout.contains("test result: ok. 1 passed"),
                "round {round}: process {i} failed ({}):\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                stdout.contains(&format!("schema-race child {i}: ok")),
                "round {round}: process {i} did not run the child part:\n{stdout}"
            );
        }
        // Each sees what the others wrote, through any coordinator.
        let mut storages = Vec::new();
        for i in 0..3 {
            let mut rotated = hosts.clone();
            rotated.rotate_left(i % hosts.len());
            let url = format!("scylla://{}/{keyspace}?{query}", rotated.join(","));
            storages.push(CassandraStorage::from_url(&url).await.unwrap());
        }
        for i in 0..3 {
            let key = Key::new(format!("schema-race/{i}/kept")).unwrap();
            for s in &storages {
                let value = format!("instance-{i}").into_bytes();
                assert_eq!(s.get(&key).await.unwrap(), Some(value), "round {round}");
            }
        }
        let table = storages[0].config().table().to_string();
        assert_one_table_id(&hosts, &keyspace, &table).await;
    }
}

/// The child part: waits for the common start, connects (creating the
/// schema), then works: insert, read back, delete, and a record the parent
/// reads back through other coordinators.
#[allow(clippy::unwrap_used)] // the child's part of the test: a failure is the test failing
async fn child(url: &str) {
    let i: usize = std::env::var(CHILD_INSTANCE).unwrap().parse().unwrap();
    let start_ms: u128 = std::env::var(CHILD_START_MS).unwrap().parse().unwrap();
    let wait = start_ms.saturating_sub(now_ms());
    tokio::time::sleep(std::time::Duration::from_millis(
        u64::try_from(wait).unwrap(),
    ))
    .await;
    let storage = CassandraStorage::from_url(url)
        .await
        .unwrap_or_else(|err| panic!("instance {i}: connecting {url}: {err:?}"));
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
    let kept = Key::new(format!("schema-race/{i}/kept")).unwrap();
    assert!(storage.insert_if_not_exists(&kept, &me, ttl).await.unwrap());
    println!("schema-race child {i}: ok");
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
