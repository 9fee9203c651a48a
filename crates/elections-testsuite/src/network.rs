//! The cases every network driver runs against its real engine, beside the
//! election suite: a refused connection, a TLS round trip with the
//! certificate checked, a lost answer through a [`Proxy`], and the
//! operations once the engine is gone. Each driver's `tests/suite.rs`
//! builds its URLs and calls these, instead of copying the assertions.
//!
//! ```no_run
//! # async fn open(url: String) -> Result<storage_mem::MemStorage, ttl_storage::StorageError> { unimplemented!() }
//! // tests/suite.rs of a driver:
//! # async fn case() {
//! elections_testsuite::network::refused_connection_is_transient(|port| {
//!     open(format!("x://127.0.0.1:{port}?connect_timeout=1s"))
//! })
//! .await;
//! # }
//! ```

use std::{
    future::Future,
    net::SocketAddr,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use ttl_storage::{Change, ErrorKind, Key, StorageError, Ttl, TtlStorage, Watch};

use crate::proxy::Proxy;

/// The engine's URL from the environment variable `var`, which `cargo
/// xtask test-drivers --engine <engine>` sets; panics saying so, with an
/// `example` to set by hand, when it is not set.
pub fn env_url(var: &str, engine: &str, example: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: run `cargo xtask test-drivers --engine {engine}`, or set \
             {var}={example}"
        )
    })
}

/// Waits at most `bound` for `watch`; true when it completed.
pub async fn completes_within(watch: Watch, bound: Duration) -> bool {
    tokio::time::timeout(bound, watch).await.is_ok()
}

/// `watcher` and `deleter` are two connections to one engine (two
/// processes, in production). A watch on `key`, which `deleter` holds with
/// no expiry, is woken neither by a swap (a renewal) within `quiet` nor by
/// a compare-and-delete that does not match, and is woken within 10 s by
/// the delete.
pub async fn watch_wakes_on_a_delete_by_another_connection(
    watcher: &impl TtlStorage,
    deleter: &impl TtlStorage,
    key: &Key,
    quiet: Duration,
) {
    assert!(ok(deleter
        .insert_if_not_exists(key, b"a", Ttl::NEVER)
        .await));
    let mut watch = ok(watcher.watch(key).map_err(|err| {
        StorageError::permanent(format!("the engine must support watching: {err}"))
    }));
    assert!(ok(deleter
        .compare_and_swap(key, b"a", b"b", Ttl::NEVER)
        .await));
    assert!(
        tokio::time::timeout(quiet, &mut watch).await.is_err(),
        "the watch completed although the record is still there"
    );
    assert!(!ok(deleter.compare_and_delete(key, b"a").await));
    assert!(ok(deleter.compare_and_delete(key, b"b").await));
    assert!(
        completes_within(watch, Duration::from_secs(10)).await,
        "the delete did not wake the watcher"
    );
    assert_eq!(ok(watcher.get(key).await), None);
}

/// The first socket address of the host that the URL `url` names (IPv6
/// brackets dropped), at its port or `default_port`: where a [`Proxy`]
/// in front of the engine forwards to. Panics on a URL without a host.
pub fn server_addr(url: &str, default_port: u16) -> SocketAddr {
    let parsed = url::Url::parse(url).unwrap_or_else(|err| panic!("{url} is not a URL: {err}"));
    let host = parsed
        .host_str()
        .unwrap_or_else(|| panic!("{url} names no host"))
        .trim_matches(['[', ']'])
        .to_string();
    let port = parsed.port().unwrap_or(default_port);
    std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .unwrap_or_else(|err| panic!("cannot resolve {host}:{port}: {err}"))
        .next()
        .unwrap_or_else(|| panic!("{host}:{port} resolves to no address"))
}

/// A [`Proxy`] in front of `upstream`; panics if it cannot listen.
pub async fn proxy_to(upstream: SocketAddr) -> Proxy {
    Proxy::start(upstream)
        .await
        .unwrap_or_else(|err| panic!("cannot start a proxy to {upstream}: {err}"))
}

/// `name` made unique to this run: `name`, `separator` and the
/// nanoseconds since the epoch (so reruns against one engine never meet
/// old records, tables or users).
pub fn unique(name: &str, separator: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{name}{separator}{nanos}")
}

/// A key no other run uses: `{driver}/{name}/{nanos}`.
pub fn unique_key(driver: &str, name: &str) -> Key {
    let text = unique(&format!("{driver}/{name}"), "/");
    Key::new(text.clone()).unwrap_or_else(|err| panic!("bad key {text}: {err}"))
}

/// `through_proxy` is a connection through `proxy` whose watches rely on
/// one server connection (a listener, a subscriber); `direct` is another
/// connection. A watch on `key`, armed for `armed` (and not woken in that
/// time), completes within 10 s once the proxy shuts down (its waiter
/// re-checks and polls: a waiter never hangs on a dead feed), and new
/// watches answer an error within `refused_within` (zero: at once) until
/// the connection is back.
pub async fn dead_feed_wakes_the_watch_and_refuses_new_ones(
    direct: &impl TtlStorage,
    through_proxy: &impl TtlStorage,
    proxy: &Proxy,
    key: &Key,
    armed: Duration,
    refused_within: Duration,
) {
    assert!(ok(direct.insert_if_not_exists(key, b"a", Ttl::NEVER).await));
    let mut watch = ok(through_proxy.watch(key).map_err(|err| {
        StorageError::permanent(format!("the engine must support watching: {err}"))
    }));
    // Armed and waiting (its first read done): only the feed's failure
    // can wake it now.
    assert!(
        tokio::time::timeout(armed, &mut watch).await.is_err(),
        "the watch completed although the record is still there"
    );
    proxy.shut_down();
    assert!(
        completes_within(watch, Duration::from_secs(10)).await,
        "a watch on a dead feed did not complete"
    );
    let deadline = tokio::time::Instant::now() + refused_within;
    while through_proxy.watch(key).is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "watch still supported on a dead feed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok(direct.compare_and_delete(key, b"a").await));
}

/// A follower of `key` through `proxy` (a storage whose feed of writes,
/// [`TtlStorage::changes`], relies on one server connection) is never left
/// believing it saw everything: once armed, the proxy drops every
/// connection and `direct` writes two values while the feed is down. The
/// follower must then either get both values, in order (a feed that
/// resumes where it stopped, as etcd's), or an [`Change::Interrupted`]
/// before anything written after it, and be armed again within 30 s (the
/// client reconnects), after which a third write is reported.
pub async fn a_lost_feed_resumes_or_says_it_was_interrupted(
    direct: &impl TtlStorage,
    through_proxy: &impl TtlStorage,
    proxy: &Proxy,
    key: &Key,
) {
    let bound = Duration::from_secs(30);
    let mut changes = through_proxy
        .changes(key, None)
        .unwrap_or_else(|err| panic!("the engine must report changes: {err}"));
    assert_eq!(next_change(&mut changes, bound).await, Change::Armed);
    assert!(ok(direct.insert_if_not_exists(key, b"a", Ttl::NEVER).await));
    assert_eq!(next_change(&mut changes, bound).await, written(b"a"));
    proxy.drop_connections();
    assert!(ok(direct
        .compare_and_swap(key, b"a", b"b", Ttl::NEVER)
        .await));
    assert!(ok(direct
        .compare_and_swap(key, b"b", b"c", Ttl::NEVER)
        .await));
    let mut seen = Vec::new();
    let resumed = loop {
        match next_change(&mut changes, bound).await {
            Change::Interrupted => break false,
            change => {
                seen.push(change);
                if seen.len() == 2 {
                    break true;
                }
            }
        }
    };
    if resumed {
        assert_eq!(seen, [written(b"b"), written(b"c")], "resumed with a gap");
    } else {
        // Interrupted: what came before it is a prefix of what was written.
        let written_then = [written(b"b"), written(b"c")];
        assert!(written_then.starts_with(&seen), "{seen:?}");
        loop {
            match next_change(&mut changes, bound).await {
                Change::Armed => break,
                Change::Written { .. } | Change::Interrupted => {}
                other => panic!("while interrupted: {other:?}"),
            }
        }
    }
    assert!(ok(direct
        .compare_and_swap(key, b"c", b"d", Ttl::NEVER)
        .await));
    loop {
        match next_change(&mut changes, bound).await {
            change if change == written(b"d") => break,
            // Re-armed feeds may repeat the state they find.
            change if change == written(b"c") => {}
            other => panic!("after the blip: {other:?}"),
        }
    }
    assert!(ok(direct.compare_and_delete(key, b"d").await));
}

/// The next change of a feed, within `bound`.
async fn next_change(changes: &mut ttl_storage::Changes, bound: Duration) -> Change {
    use futures::StreamExt;
    tokio::time::timeout(bound, changes.next())
        .await
        .unwrap_or_else(|_| panic!("no change within {bound:?}"))
        .unwrap_or_else(|| panic!("the feed ended"))
}

fn written(value: &[u8]) -> Change {
    Change::Written {
        value: value.to_vec(),
        count: None,
    }
}

/// A port of 127.0.0.1 that nothing listens on (bound, then let go).
pub fn unused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap_or_else(|err| panic!("cannot bind a local port: {err}"));
    listener
        .local_addr()
        .unwrap_or_else(|err| panic!("no local address: {err}"))
        .port()
}

/// `open(port)`, with a port nothing listens on, fails as
/// [`ErrorKind::Transient`] (at connect time: the engine may come back).
pub async fn refused_connection_is_transient<S, F>(open: impl FnOnce(u16) -> F)
where
    F: Future<Output = Result<S, StorageError>>,
{
    match open(unused_port()).await {
        Ok(_) => panic!("connected to a port nothing listens on"),
        Err(err) => assert_eq!(err.kind(), ErrorKind::Transient, "{err}"),
    }
}

/// What a client sends first, seen on the wire: listens on a loopback
/// port, runs `open(port)` against it, and returns its outcome, the client's
/// first `first` bytes (to which the listener answers `reply`), and what
/// the client sent after that answer until it closed (at most 2 s).
///
/// For the no-fallback cases: a TLS URL's first bytes are a ClientHello or
/// an SSLRequest, and nothing (no user name, no command) follows a refusal.
pub async fn what_a_client_sends_first<T, F>(
    first: usize,
    reply: &'static [u8],
    open: impl FnOnce(u16) -> F,
) -> (T, Vec<u8>, Vec<u8>)
where
    F: Future<Output = T>,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|err| panic!("cannot bind a local port: {err}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|err| panic!("no local address: {err}"))
        .port();
    let sniff = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.expect("the client connects");
        let mut head = vec![0u8; first];
        conn.read_exact(&mut head)
            .await
            .expect("the client's first bytes");
        conn.write_all(reply).await.expect("the answer");
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.read_to_end(&mut rest)).await;
        (head, rest)
    });
    let outcome = open(port).await;
    let (head, rest) = sniff.await.expect("the listener");
    (outcome, head, rest)
}

/// `open` (a TLS URL to a server that speaks plaintext) fails within
/// `bound` (never hangs) as [`ErrorKind::Permanent`] (a configuration
/// mistake, never a plaintext session), saying once that the server does
/// not speak TLS. Returns the message, for the driver's own checks of it.
pub async fn tls_to_a_plaintext_server_fails_plainly<S, F>(open: F, bound: Duration) -> String
where
    F: Future<Output = Result<S, StorageError>>,
{
    let result = tokio::time::timeout(bound, open)
        .await
        .unwrap_or_else(|_| panic!("a TLS handshake with a plaintext server hung for {bound:?}"));
    let Err(err) = result else {
        panic!("a TLS URL connected to a plaintext server");
    };
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    let said = err.to_string();
    assert_eq!(said.matches("does not speak TLS").count(), 1, "{said}");
    said
}

/// Every operation works on `storage` (opened over TLS by the caller), and
/// opening `wrong_ca` (the same server, another CA to trust) fails as
/// [`ErrorKind::Permanent`]: the server's certificate is checked.
pub async fn tls_round_trip_and_certificate_check<S>(
    storage: &impl TtlStorage,
    key: &Key,
    wrong_ca: impl Future<Output = Result<S, StorageError>>,
) {
    let ttl = Ttl::from_secs(5).unwrap_or_else(|err| panic!("{err}"));
    assert!(ok(storage.insert_if_not_exists(key, b"t", ttl).await));
    assert!(ok(storage.compare_and_swap(key, b"t", b"u", ttl).await));
    assert_eq!(ok(storage.get(key).await).as_deref(), Some(&b"u"[..]));
    assert!(ok(storage.compare_and_delete(key, b"u").await));
    match wrong_ca.await {
        Ok(_) => panic!("connected while trusting another CA"),
        Err(err) => assert_eq!(err.kind(), ErrorKind::Permanent, "{err}"),
    }
}

/// With `key` holding `a` (written through `proxy` by `storage`), the
/// proxy swallows every answer: a swap sent through it is
/// [`ErrorKind::OutcomeUnknown`], and `direct` (connected to the engine
/// itself) finds it applied. With `read_too`, a read through the proxy is
/// then [`ErrorKind::Transient`].
pub async fn lost_answer_of_a_write_is_outcome_unknown(
    storage: &impl TtlStorage,
    direct: &impl TtlStorage,
    proxy: &Proxy,
    key: &Key,
    ttl: Ttl,
    read_too: bool,
) {
    proxy.swallow_answers(true);
    match storage.compare_and_swap(key, b"a", b"b", ttl).await {
        Ok(swapped) => panic!("the answer came through a proxy that swallows it: {swapped}"),
        Err(err) => assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}"),
    }
    // Applied, if not yet then soon: a write whose answer was lost may
    // land after the client gave up on it (one CI run read "a" at once).
    let mut seen = ok(direct.get(key).await);
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while seen.as_deref() != Some(&b"b"[..]) && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = ok(direct.get(key).await);
    }
    assert_eq!(seen.as_deref(), Some(&b"b"[..]));
    if read_too {
        match storage.get(key).await {
            Ok(value) => panic!("the answer came through a proxy that swallows it: {value:?}"),
            Err(err) => assert_eq!(err.kind(), ErrorKind::Transient, "{err}"),
        }
    }
}

/// How long [`renewal_applied_late_never_moves_the_expiry_earlier`] holds
/// the first renewal in the proxy.
pub const LATE_RENEWAL_HOLD: Duration = Duration::from_millis(2_500);

/// Issue 34, case 7: a renewal applied late never moves the expiry earlier
/// than a renewal already acknowledged.
///
/// `direct` is a connection to the engine at `server`; the case starts a
/// [`Proxy`] to `server` and opens `held` through it with
/// `open_held(proxy address)` (two clients standing for one process whose
/// two attempts were reordered on the way, as follower forwarding in an
/// etcd cluster or a retransmitted packet does). `direct` inserts `key` with a 5 s TTL; `held` renews it
/// (`v -> v`) once through the proxy to warm its connection up (prepared
/// statements, loaded scripts), then renews again while the proxy holds its
/// request back, after letting `answers_before_write` answers through (etcd:
/// 1, the lease grant that anchors the expiry; others 0). While that
/// request waits for [`LATE_RENEWAL_HOLD`], `direct` renews and is
/// acknowledged; then the held request arrives. The renewal acknowledged
/// last promised the record until its start + 5 s: the record must still be
/// there 1.5 s before that, whatever the late request did. A driver that
/// anchors the late request's expiry at its send (an etcd lease granted
/// before the hold, a client-side `now + ttl`) and lets it land loses the
/// record 1 s before this check. The late call itself must answer
/// `Ok(true)`: the record held its value all along.
///
/// `held` must wait longer than the hold for an answer (a request timeout
/// of 10 s or more).
pub async fn renewal_applied_late_never_moves_the_expiry_earlier<S, F>(
    server: SocketAddr,
    direct: &impl TtlStorage,
    open_held: impl FnOnce(SocketAddr) -> F,
    key: &Key,
    answers_before_write: usize,
) where
    S: TtlStorage,
    F: Future<Output = S>,
{
    let proxy = proxy_to(server).await;
    let held = open_held(proxy.addr).await;
    let secs = 5;
    let ttl = Ttl::from_secs(secs).unwrap_or_else(|err| panic!("{err}"));
    assert!(ok(direct.insert_if_not_exists(key, b"v", ttl).await));
    assert!(
        ok(held.compare_and_swap(key, b"v", b"v", ttl).await),
        "the warm-up renewal through the proxy failed"
    );
    proxy.hold_requests_after(answers_before_write);
    let late = async {
        let answer = held.compare_and_swap(key, b"v", b"v", ttl).await;
        (answer, tokio::time::Instant::now())
    };
    let on_time = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while proxy.held_bytes() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the proxy never held the renewal: does the driver send it through the proxy?"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(LATE_RENEWAL_HOLD).await;
        let start = tokio::time::Instant::now();
        assert!(
            ok(direct.compare_and_swap(key, b"v", b"v", ttl).await),
            "the on-time renewal failed"
        );
        proxy.release_requests();
        start
    };
    let ((late, late_answered), acknowledged_start) = tokio::join!(late, on_time);
    assert!(
        late_answered > acknowledged_start,
        "the late renewal answered before the proxy let it through: it did not go through the proxy"
    );
    assert!(
        ok(late),
        "the late renewal answered false although the record held its value"
    );
    let check_at = acknowledged_start + Duration::from_secs(secs) - Duration::from_millis(1_500);
    tokio::time::sleep_until(check_at).await;
    assert_eq!(
        ok(direct.get(key).await).as_deref(),
        Some(&b"v"[..]),
        "a renewal applied late moved the expiry earlier: the record is gone 1.5 s before \
         the acknowledged renewal's start + TTL"
    );
}

/// After `proxy` shut down: `op` fails as [`ErrorKind::Transient`] within
/// 10 s (a driver may take a moment to see its connection gone), and
/// returns that error.
pub async fn transient_once_gone<T: std::fmt::Debug, F>(mut op: impl FnMut() -> F) -> StorageError
where
    F: Future<Output = Result<T, StorageError>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match op().await {
            Err(err) if err.kind() == ErrorKind::Transient => return err,
            other => {
                assert!(tokio::time::Instant::now() < deadline, "{other:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn ok<T>(result: Result<T, StorageError>) -> T {
    result.unwrap_or_else(|err| panic!("{err}"))
}
