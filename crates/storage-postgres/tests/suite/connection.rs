//! Connections: passwords, TLS without fallback, refused and lost connections, a renewal applied late (see `main.rs` for how to run them).

use super::*;

/// A wrong password is a permanent error that does not show the password.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn wrong_password_is_permanent() {
    let url = url_with(|u| u.set_password(Some("hunter2")).unwrap());
    let err = PostgresStorage::from_url(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
    // Said once, without the pool's wrapper: as connecting, in the
    // server's words (not as the pooler check that happens to connect
    // first), or, through PgBouncer (which checks passwords itself), as the
    // pooler refusing the credentials.
    let said = err.to_string();
    assert!(!said.contains("creating a new object"), "{said}");
    if said.contains("pooler refused the credentials") {
        assert_eq!(said.matches("refused the credentials").count(), 1, "{said}");
    } else {
        assert!(said.contains("connecting to"), "{said}");
        assert_eq!(
            said.matches("password authentication failed").count(),
            1,
            "{said}"
        );
    }
}

/// `sslmode=require` against a server without TLS fails, saying so; it
/// never falls back to plaintext.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn require_tls_against_plaintext_server_fails() {
    let err = PostgresStorage::from_url(&with_query("sslmode=require"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    // Said as connecting, once. A server without TLS (PgBouncer's client
    // side in the pgbouncer row) says so; the `postgres` row's server has
    // TLS with a CA the system does not trust, and that is what is said.
    let said = err.to_string();
    assert!(!said.contains("pooler"), "{said}");
    assert!(said.contains("connecting to"), "{said}");
    if said.contains("does not support TLS") {
        assert_eq!(said.matches("does not support TLS").count(), 1, "{said}");
    } else {
        assert!(
            said.contains("certificate") || said.contains("Certificate"),
            "{said}"
        );
    }
}

fn tls_url() -> String {
    std::env::var("POSTGRES_TLS_URL").unwrap_or_else(|_| {
        panic!(
            "POSTGRES_TLS_URL is not set: `cargo xtask test-drivers --engine postgres` sets it; \
             with your own server set POSTGRES_TLS_URL=postgres://...?sslmode=verify-full&sslrootcert=/path/ca.pem"
        )
    })
}

/// With `sslmode=verify-full` and the server's CA every operation works,
/// and the session is encrypted; with another CA the connection is refused.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn tls_round_trip_and_certificate_check() {
    let s = connect_url(&tls_url()).await;
    let other_ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ca.pem");
    let mut wrong = url::Url::parse(&tls_url()).unwrap();
    wrong.set_query(Some(&format!("sslmode=verify-full&sslrootcert={other_ca}")));
    let wrong_ca = PostgresStorage::from_url(wrong.as_str());
    network::tls_round_trip_and_certificate_check(&s, &key("tls"), wrong_ca).await;
    let client = s.pool().get().await.unwrap();
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the session is not encrypted");
}

/// On the wire: with `sslmode=verify-full` the client's first message is
/// an SSLRequest, and a server that answers "no TLS" ends the attempt —
/// no startup message (which would carry the user name) follows.
#[tokio::test]
async fn ssl_request_first_and_no_plaintext_fallback() {
    let (opened, request, rest) = network::what_a_client_sends_first(8, b"N", |port| async move {
        PostgresStorage::from_url(&format!(
            "postgres://app:secret@127.0.0.1:{port}/db?sslmode=verify-full&connect_timeout=2s"
        ))
        .await
    })
    .await;
    let err = opened.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(!err.to_string().contains("secret"), "{err}");
    // Length 8, then the SSLRequest code 80877103.
    assert_eq!(request, [0, 0, 0, 8, 4, 210, 22, 47]);
    assert!(
        rest.is_empty(),
        "sent {} bytes after refusing TLS",
        rest.len()
    );
}

/// A server that refuses connections is a transient error at connect time.
#[tokio::test]
async fn refused_connection_is_transient() {
    network::refused_connection_is_transient(|port| async move {
        PostgresStorage::from_url(&format!("postgres://u@127.0.0.1:{port}/db")).await
    })
    .await;
}

/// A write whose answer is lost is outcome unknown (and here it was in
/// fact applied); a read in the same situation is transient; once the
/// server cannot be reached, operations are transient.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn lost_answers_and_lost_connections() {
    let direct = connect_url(&base_url()).await;
    let proxy = network::proxy_to(server_addr()).await;
    let url = url_with(|u| {
        u.set_port(Some(proxy.addr.port())).unwrap();
        // connect_timeout: a SCRAM login of a debug build on a loaded
        // machine can take over a second (the pool's create timeout).
        u.set_query(Some("timeout=1s&connect_timeout=3s&pool_size=1"));
    });
    let s = connect_url(&url).await;
    let k = key("lost");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(30)).await.unwrap());
    // Prepare the swap's statement on the one pooled connection first: a
    // lost answer while preparing is (rightly) transient, not unknown.
    assert!(s.compare_and_swap(&k, b"a", b"a", ttl(30)).await.unwrap());
    network::lost_answer_of_a_write_is_outcome_unknown(&s, &direct, &proxy, &k, ttl(30), false)
        .await;

    proxy.shut_down();
    // The pooled connection is gone and new ones are refused.
    let err = network::transient_once_gone(|| s.compare_and_delete(&k, b"b")).await;
    assert!(err.to_string().contains("connect"), "{err}");
    let err = s.get(&k).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert_eq!(direct.get(&k).await.unwrap().as_deref(), Some(&b"b"[..]));
}

/// Issue 34, case 7 (the shared case): a renewal held 2.5 s on its way
/// lands after a later one was acknowledged; its expiry counts from when
/// the server writes the row, so it can only lengthen the lease.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn renewal_applied_late_never_moves_the_expiry_earlier() {
    let direct = connect_url(&base_url()).await;
    let through = |proxy: SocketAddr| async move {
        let url = url_with(|u| {
            u.set_port(Some(proxy.port())).unwrap();
            // connect_timeout: how long connecting waits for the listener.
            u.set_query(Some("timeout=20s&connect_timeout=3s&pool_size=1"));
        });
        connect_url(&url).await
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
