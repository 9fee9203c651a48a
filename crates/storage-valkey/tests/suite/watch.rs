//! Watches: wake-ups by another connection, a dead subscriber, a user without channel rights (see `main.rs` for how to run them).

use super::*;

/// A compare-and-delete by another connection (another process, in
/// production) wakes a watcher, and a key without expiry is watched
/// without a timer: nothing but the delete wakes it.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn watch_wakes_on_a_delete_by_another_connection() {
    let watcher = connect().await;
    let deleter = connect().await;
    // A renewal (a swap) publishes nothing; there is no timer either.
    network::watch_wakes_on_a_delete_by_another_connection(
        &watcher,
        &deleter,
        &key("watch-other"),
        Duration::from_millis(300),
    )
    .await;
}

/// The delete is published on `<prefix>__deleted` with the server key as
/// the message (what another client could subscribe to as well); an insert
/// is published there as `key NUL NUL value` (a new value, no count).
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn compare_and_delete_publishes_the_key() {
    use fred::prelude::{EventInterface, PubsubInterface};
    // Its own prefix, so its own channel: other cases delete concurrently.
    let url = url_with(|u| u.set_query(Some("prefix=suite-publish:")));
    let s = ValkeyStorage::from_url(&url).await.unwrap();
    assert_eq!(s.watch_channel(), "suite-publish:__deleted");
    let listener = fred::prelude::Builder::from_config(
        fred::prelude::Config::from_url(&direct_url()).unwrap(),
    )
    .build()
    .unwrap();
    let mut messages = listener.message_rx();
    listener.init().await.unwrap();
    listener.subscribe(s.watch_channel()).await.unwrap();
    // Both subscriptions (the listener's and the storage's own) in force
    // on the server before the first write: the insert's message is then
    // never published to no one.
    let counted = async {
        loop {
            let answer: Vec<fred::types::Value> = s
                .client()
                .custom(
                    fred::cmd!("PUBSUB"),
                    vec!["NUMSUB".to_owned(), s.watch_channel().to_owned()],
                )
                .await
                .unwrap();
            if let [_, fred::types::Value::Integer(n)] = answer.as_slice()
                && *n >= 2
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), counted)
        .await
        .expect("the subscriptions were not counted within 10 s");
    let k = key("published");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(30)).await.unwrap());
    assert!(!s.compare_and_delete(&k, b"other").await.unwrap());
    assert!(s.compare_and_delete(&k, b"a").await.unwrap());
    let inserted = tokio::time::timeout(Duration::from_secs(10), messages.recv())
        .await
        .expect("no message published")
        .unwrap();
    assert_eq!(
        inserted.value.as_bytes(),
        Some(format!("{}\0\0a", s.server_key(&k)).as_bytes())
    );
    let message = tokio::time::timeout(Duration::from_secs(10), messages.recv())
        .await
        .expect("no message published")
        .unwrap();
    assert_eq!(&*message.channel, "suite-publish:__deleted");
    // Only the successful delete published.
    assert_eq!(
        message.value.as_str().as_deref(),
        Some(s.server_key(&k).as_str())
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), messages.recv())
            .await
            .is_err()
    );
}

/// When the subscriber's connection dies, a pending watch completes (its
/// waiter re-checks and polls) and new watches answer `WatchUnsupported`
/// until the subscriber is back: a waiter never hangs on a dead
/// subscription.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn dead_subscriber_wakes_and_reports_unsupported() {
    let direct = connect().await;
    let proxy = network::proxy_to(server_addr()).await;
    let url = format!("redis://{}?timeout=500ms&connect_timeout=500ms", proxy.addr);
    let s = ValkeyStorage::from_url(&url).await.unwrap();
    // The client notices the dead subscriber on its own time: new watches
    // are refused within 10 s.
    network::dead_feed_wakes_the_watch_and_refuses_new_ones(
        &direct,
        &s,
        &proxy,
        &key("dead-subscriber"),
        Duration::from_millis(300),
        Duration::from_secs(10),
    )
    .await;
}

/// A user that may not use the delete channel (Redis 7's default ACL gives
/// new users no channels) still deletes, and its watches answer
/// `WatchUnsupported` (the subscription was refused) instead of hanging.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn user_without_channel_rights_deletes_and_polls() {
    let admin = connect().await;
    set_acl_user(
        &admin,
        "storage-valkey-nochannels",
        &[">nochannels", "~ttl:*", "resetchannels", "+@all"],
    )
    .await;
    let url = url_with(|u| {
        u.set_username("storage-valkey-nochannels").unwrap();
        u.set_password(Some("nochannels")).unwrap();
        u.set_query(Some("connect_timeout=1h"));
    });
    // The refused probe ends the wait for the subscription: connecting
    // does not hang until the (one hour) connect timeout.
    let s = tokio::time::timeout(Duration::from_secs(60), ValkeyStorage::from_url(&url))
        .await
        .expect("connecting waited for the connect timeout although the channel is refused")
        .unwrap();
    let k = key("nochannels");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(30)).await.unwrap());
    assert!(
        s.watch(&k).is_err(),
        "a refused subscription must report unsupported"
    );
    assert!(s.compare_and_delete(&k, b"a").await.unwrap());
    assert_eq!(admin.get(&k).await.unwrap(), None);
}

/// The feed of a key's writes (`changes`) across dropped connections: the
/// subscriber's followers are told it was interrupted (deletes and values
/// published meanwhile are lost), then armed again once it is proven.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn changes_say_when_the_subscriber_was_cut() {
    let direct = connect().await;
    let proxy = network::proxy_to(server_addr()).await;
    let url = format!("redis://{}?timeout=500ms&connect_timeout=500ms", proxy.addr);
    let s = ValkeyStorage::from_url(&url).await.unwrap();
    network::a_lost_feed_resumes_or_says_it_was_interrupted(&direct, &s, &proxy, &key("blip"))
        .await;
}
