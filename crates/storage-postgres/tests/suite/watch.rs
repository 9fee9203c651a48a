//! Watches: wake-ups by another connection and a dead listener (see `main.rs` for how to run them).

use super::*;

/// A compare-and-delete by another storage (another process, in
/// production) wakes a watcher; a swap does not, and a record without
/// expiry is watched without a timer: nothing but the delete wakes it.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn watch_wakes_on_a_delete_by_another_storage() {
    let watcher = connect_url(&base_url()).await;
    let deleter = connect_url(&base_url()).await;
    network::watch_wakes_on_a_delete_by_another_connection(
        &watcher,
        &deleter,
        &key("watch-other"),
        Duration::from_millis(500),
    )
    .await;
}

/// Compare-and-delete notifies the table's channel with the key, once,
/// and only when it deleted; the insert before it notified its new value
/// (`key LF count LF hex(value)`, no count).
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn compare_and_delete_notifies_the_key() {
    let table = unique("suite_notify");
    let s = connect_url(&with_query(&format!("table={table}"))).await;
    assert!(s.watch_channel().starts_with("ttl_storage_"));
    // A plain LISTEN connection, its notifications forwarded here.
    let (client, mut connection) = tokio_postgres::connect(&base_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = tx.send((n.channel().to_string(), n.payload().to_string()));
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {}", s.watch_channel()))
        .await
        .unwrap();
    let k = key("notify");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(30)).await.unwrap());
    assert!(!s.compare_and_delete(&k, b"other").await.unwrap());
    assert!(s.compare_and_delete(&k, b"a").await.unwrap());
    assert!(!s.compare_and_delete(&k, b"a").await.unwrap());
    let (_, inserted) = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
        .await
        .expect("no notification")
        .unwrap();
    assert_eq!(inserted, format!("{k}\n\n61"));
    let (channel, payload) = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
        .await
        .expect("no notification")
        .unwrap();
    assert_eq!(channel, s.watch_channel());
    assert_eq!(payload, k.as_str());
    // Only the delete that deleted notified (its transaction committed).
    assert!(
        tokio::time::timeout(Duration::from_millis(300), notifications.recv())
            .await
            .is_err()
    );
}

/// A storage connected directly, a proxy to the server, and a storage
/// (one pooled connection, and its listener) through that proxy.
async fn through_a_proxy() -> (
    PostgresStorage,
    elections_testsuite::proxy::Proxy,
    PostgresStorage,
) {
    let direct = connect_url(&base_url()).await;
    let proxy = network::proxy_to(server_addr()).await;
    let url = url_with(|u| {
        u.set_host(Some(&proxy.addr.ip().to_string())).unwrap();
        u.set_port(Some(proxy.addr.port())).unwrap();
        u.set_query(Some("pool_size=1&connect_timeout=5s"));
    });
    let s = connect_url(&url).await;
    (direct, proxy, s)
}

/// When the listener's connection dies, a pending watch completes (its
/// waiter re-checks and polls) and new watches answer `WatchUnsupported`
/// until it listens again: a waiter never hangs on a dead listener.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn dead_listener_wakes_and_reports_unsupported() {
    let (direct, proxy, s) = through_a_proxy().await;
    // New watches are refused as soon as the listener is found dead.
    network::dead_feed_wakes_the_watch_and_refuses_new_ones(
        &direct,
        &s,
        &proxy,
        &key("dead-listener"),
        Duration::from_millis(500),
        Duration::ZERO,
    )
    .await;
}

/// The feed of a key's writes (`changes`) across dropped connections: the
/// listener's followers are told it was interrupted (notifications sent
/// meanwhile are lost), then armed again once it listens.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn changes_say_when_the_listener_was_cut() {
    let (direct, proxy, s) = through_a_proxy().await;
    network::a_lost_feed_resumes_or_says_it_was_interrupted(&direct, &s, &proxy, &key("blip"))
        .await;
}
