//! Connections: ACL users and passwords, TLS without fallback, refused and lost connections, a renewal applied late (see `main.rs` for how to run them).

use super::*;

/// `user:password@` authenticates with an ACL user; a wrong password is a
/// permanent error whose message does not show the password.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn acl_user_and_wrong_password() {
    let admin = connect().await;
    set_acl_user(
        &admin,
        "storage-valkey-suite",
        &[">pa:ss@wörd", "~ttl:*", "+@all"],
    )
    .await;
    let good = url_with(|u| {
        u.set_username("storage-valkey-suite").unwrap();
        u.set_password(Some("pa%3Ass%40w%C3%B6rd")).unwrap();
    });
    let s = ValkeyStorage::from_url(&good).await.unwrap();
    let k = key("acl");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(5)).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap().as_deref(), Some(&b"a"[..]));

    let bad = url_with(|u| {
        u.set_username("storage-valkey-suite").unwrap();
        u.set_password(Some("hunter2")).unwrap();
    });
    let err = ValkeyStorage::from_url(&bad).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
    let said = err.to_string();
    assert_eq!(said.matches("WRONGPASS").count(), 1, "{said}");
}

/// `rediss://` to a plaintext port fails; it never falls back to plaintext.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn rediss_to_plaintext_port_fails() {
    let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ca.pem");
    let url = url_with(|u| {
        u.set_scheme("rediss").unwrap();
        u.query_pairs_mut()
            .append_pair("tls_ca_file", ca)
            .append_pair("connect_timeout", "2s");
    });
    // The plaintext server waits for the rest of a "command" that never
    // comes, so the handshake times out; a plaintext PING to the same port
    // then tells why, and that is what is said (once), not the timeout.
    let said = network::tls_to_a_plaintext_server_fails_plainly(
        ValkeyStorage::from_url(&url),
        Duration::from_secs(10),
    )
    .await;
    assert!(!said.contains("timed out"), "{said}");
}

fn tls_url() -> String {
    std::env::var("VALKEY_TLS_URL").unwrap_or_else(|_| {
        panic!(
            "VALKEY_TLS_URL is not set: `cargo xtask test-drivers --engine valkey` sets it; with \
             your own server set VALKEY_TLS_URL=rediss://host:port?tls_ca_file=/path/ca.pem"
        )
    })
}

/// Over `rediss://` with the server's CA, every operation works; with
/// another CA the connection is refused (the certificate is checked).
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn tls_round_trip_and_certificate_check() {
    let s = ValkeyStorage::from_url(&tls_url()).await.unwrap();
    assert!(s.config().tls().is_some());
    let other_ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ca.pem");
    let mut wrong = url::Url::parse(&tls_url()).unwrap();
    wrong.set_query(Some(&format!("tls_ca_file={other_ca}")));
    let wrong_ca = ValkeyStorage::from_url(wrong.as_str());
    network::tls_round_trip_and_certificate_check(&s, &key("tls"), wrong_ca).await;
}

/// What a `rediss://` client sends first is a TLS ClientHello, never a
/// plaintext command (checked on the wire, against a listener that never
/// answers).
#[tokio::test]
async fn rediss_sends_a_tls_client_hello_first() {
    let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ca.pem");
    let (opened, first, _) = network::what_a_client_sends_first(3, b"", |port| async move {
        ValkeyStorage::from_url(&format!(
            "rediss://:secret@127.0.0.1:{port}?tls_ca_file={ca}&connect_timeout=1s"
        ))
        .await
    })
    .await;
    let err = opened.unwrap_err();
    assert!(!err.to_string().contains("secret"), "{err}");
    // TLS record type 22 (handshake), protocol 3.x; a RESP command starts with '*'.
    assert_eq!(
        first[0], 0x16,
        "first byte {first:?} is not a TLS handshake"
    );
    assert_eq!(first[1], 0x03);
}

/// A server that refuses connections is a transient error, at connect time.
#[tokio::test]
async fn refused_connection_is_transient() {
    network::refused_connection_is_transient(|port| async move {
        ValkeyStorage::from_url(&format!("redis://127.0.0.1:{port}")).await
    })
    .await;
}

/// A write whose answer is lost after it was sent is outcome unknown (and
/// here it was in fact applied); a read in the same situation is
/// transient; once the connection is gone, operations are transient
/// without being sent.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn lost_answers_and_lost_connections() {
    let direct = connect().await;
    let proxy = network::proxy_to(server_addr()).await;
    let url = format!("redis://{}?timeout=500ms&connect_timeout=500ms", proxy.addr);
    let s = ValkeyStorage::from_url(&url).await.unwrap();
    let k = key("lost");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(10)).await.unwrap());
    // The swap's script cached on the server first: a server that does not
    // have it answers `NOSCRIPT` without running it, and with that answer
    // swallowed the script is never sent again, so nothing would land (the
    // case failed that way once in CI, when no earlier case had swapped).
    assert!(s.compare_and_swap(&k, b"a", b"a", ttl(10)).await.unwrap());
    network::lost_answer_of_a_write_is_outcome_unknown(&s, &direct, &proxy, &k, ttl(10), true)
        .await;

    proxy.shut_down();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.client().is_connected() {
        assert!(tokio::time::Instant::now() < deadline, "still connected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let err = s.compare_and_delete(&k, b"b").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    let err = s.insert_if_not_exists(&k, b"c", ttl(10)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(!err.to_string().contains("secret"), "{err}");
    assert_eq!(direct.get(&k).await.unwrap().as_deref(), Some(&b"b"[..]));
}

/// Issue 34, case 7 (the shared case): a renewal held 2.5 s on its way
/// lands after a later one was acknowledged; the server sets `PX` when it
/// runs the script, so it can only lengthen the lease.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn renewal_applied_late_never_moves_the_expiry_earlier() {
    let direct = connect().await;
    let through = |proxy| async move {
        let url = format!("redis://{proxy}?timeout=20s");
        ValkeyStorage::from_url(&url).await.unwrap()
    };
    network::renewal_applied_late_never_moves_the_expiry_earlier(
        server_addr(),
        &direct,
        through,
        &key("late-renewal"),
        0,
    )
    .await;
}
