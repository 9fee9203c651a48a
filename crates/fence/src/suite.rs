//! The behaviour suite every driver's fence runs against its real engine,
//! the way it runs `elections-testsuite` (feature `suite`).
//!
//! ```ignore
//! // crates/storage-x/tests/suite.rs (dev-dependencies: `fence` with
//! // feature `suite`, and `tokio`)
//! async fn make_fence() -> fence::DynFence {
//!     std::sync::Arc::new(storage_x::fence::XFence::connect_for_tests().await)
//! }
//!
//! fence::suite!(make_fence, ignore = "needs X: run `cargo xtask test-drivers --engine x`");
//! ```
//!
//! Each case becomes its own `#[tokio::test]` in a module `fence_suite`;
//! `make_fence` is called once per case. Resource names carry a random
//! suffix, so cases run in parallel against one server and re-runs never
//! collide.

// Test-support code: panicking with a clear message is how a case fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ttl_storage::ErrorKind;

use crate::{AppendOutcome, DynFence, FenceOutcome, Fenced, LogEntry, Numbering};

/// Expands to one `#[tokio::test]` per case of this suite, in a module
/// `fence_suite`. `make` is the name of an `async fn() -> fence::DynFence`
/// in scope; `ignore = "reason"` marks every case ignored (run them with
/// `cargo test -- --ignored`).
#[macro_export]
macro_rules! suite {
    ($make:ident) => {
        $crate::__fence_suite!({} $make);
    };
    ($make:ident, ignore = $reason:literal) => {
        $crate::__fence_suite!({ #[ignore = $reason] } $make);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __fence_suite {
    ($attrs:tt $make:ident) => {
        /// The shared `fence` behaviour suite.
        mod fence_suite {
            $crate::__fence_cases!($attrs $make;
                orders_tokens,
                racing_writers_leave_the_highest,
                appends_in_order,
                racing_appends_keep_token_order,
                tokens_beyond_i64_are_exact_or_refused,
            );
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __fence_cases {
    ($attrs:tt $make:ident; $case:ident, $($rest:ident,)*) => {
        $crate::__fence_cases!(@one $attrs $make, $case);
        $crate::__fence_cases!($attrs $make; $($rest,)*);
    };
    ($attrs:tt $make:ident;) => {};
    (@one { $($attr:tt)* } $make:ident, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($attr)*
        async fn $case() {
            $crate::suite::$case(super::$make().await).await;
        }
    };
}

/// A resource name unique to this run.
pub fn resource(case: &str) -> String {
    format!("{case}-{:016x}", rand::random::<u64>())
}

/// Lower tokens are refused (exactly, beyond 2^53 too) and change
/// nothing, equal and higher ones are accepted, the register keeps the
/// value of the highest accepted write, and resources are independent.
pub async fn orders_tokens(fence: DynFence) {
    let r = resource("order");
    assert_eq!(fence.read(&r).await.unwrap(), None);
    let write = |token: u64, value: &'static [u8]| {
        let (fence, r) = (fence.clone(), r.clone());
        async move { fence.write(&r, token, value).await.unwrap() }
    };
    assert_eq!(write(5, b"five").await, FenceOutcome::Accepted);
    assert_eq!(
        write(3, b"three").await,
        FenceOutcome::Rejected { highest: 5 }
    );
    assert_eq!(
        fence.read(&r).await.unwrap(),
        Some(Fenced {
            token: 5,
            value: b"five".to_vec()
        })
    );
    assert_eq!(write(5, b"five again").await, FenceOutcome::Accepted);
    assert_eq!(write(7, b"seven").await, FenceOutcome::Accepted);
    assert_eq!(
        write(6, b"zombie").await,
        FenceOutcome::Rejected { highest: 7 }
    );
    assert_eq!(
        write(1, b"older").await,
        FenceOutcome::Rejected { highest: 7 }
    );
    assert_eq!(
        fence.read(&r).await.unwrap(),
        Some(Fenced {
            token: 7,
            value: b"seven".to_vec()
        })
    );
    // Beyond 2^53 (a double's exact range): compared exactly.
    let big = (1u64 << 60) + 1;
    assert_eq!(write(big, b"big").await, FenceOutcome::Accepted);
    assert_eq!(
        write(big - 1, b"big-1").await,
        FenceOutcome::Rejected { highest: big }
    );
    assert_eq!(
        fence.read(&r).await.unwrap(),
        Some(Fenced {
            token: big,
            value: b"big".to_vec()
        })
    );
    // Other resources are independent, a name extending this one's too.
    for other in [resource("order-other"), format!("{r}/more")] {
        assert_eq!(
            fence.write(&other, 1, b"one").await.unwrap(),
            FenceOutcome::Accepted
        );
    }
}

/// A write repeated with the same token while its outcome is unknown or the
/// engine says try again (a contended Paxos round on a replicated
/// Cassandra times out: the contract allows it, and a repeat with the same
/// token is accepted if the first landed).
async fn write_until_answered(
    fence: &dyn crate::Fence,
    r: &str,
    t: u64,
    value: &[u8],
) -> FenceOutcome {
    let mut attempts = 0;
    loop {
        match fence.write(r, t, value).await {
            Ok(outcome) => return outcome,
            Err(err) if err.kind() != ttl_storage::ErrorKind::Permanent && attempts < 20 => {
                attempts += 1;
                tokio::time::sleep(std::time::Duration::from_millis(50 * attempts)).await;
            }
            Err(err) => panic!("write of token {t} failed: {err}"),
        }
    }
}

/// Sixteen writers race on a fresh resource with tokens 1..=16: the
/// highest is always accepted, a refusal names a higher token, and the
/// register ends with the highest token's value.
pub async fn racing_writers_leave_the_highest(fence: DynFence) {
    for _round in 0..3 {
        let r = resource("race");
        let writes: Vec<_> = (1..=16u64)
            .map(|t| {
                let (fence, r) = (fence.clone(), r.clone());
                tokio::spawn(async move {
                    (
                        t,
                        write_until_answered(&*fence, &r, t, t.to_string().as_bytes()).await,
                    )
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for write in writes {
            outcomes.push(write.await.unwrap());
        }
        for (t, outcome) in &outcomes {
            match outcome {
                FenceOutcome::Accepted => {}
                FenceOutcome::Rejected { highest } => {
                    assert!(highest > t, "token {t} rejected by {highest}");
                }
            }
        }
        assert_eq!(outcomes[15], (16, FenceOutcome::Accepted));
        assert_eq!(
            fence.read(&r).await.unwrap(),
            Some(Fenced {
                token: 16,
                value: b"16".to_vec()
            })
        );
    }
}

/// Appends are numbered in accept order (as [`Numbering`] says); a lower
/// token than the highest seen — by an append or a register write: they
/// share the token — is refused and leaves no entry; the log reads back
/// exactly this resource's entries (not those of `<resource>/more`).
pub async fn appends_in_order(fence: DynFence) {
    let r = resource("log");
    assert!(fence.log(&r).await.unwrap().is_empty());
    let append = |r: String, token: u64, value: &'static [u8]| {
        let fence = fence.clone();
        async move { fence.append(&r, token, value).await.unwrap() }
    };
    let seq = |outcome: AppendOutcome| match outcome {
        AppendOutcome::Appended { seq } => seq,
        AppendOutcome::Rejected { highest } => panic!("refused: highest {highest}"),
    };
    let first = seq(append(r.clone(), 3, b"three").await);
    let second = seq(append(r.clone(), 3, b"three again").await);
    assert_eq!(
        append(r.clone(), 2, b"stale").await,
        AppendOutcome::Rejected { highest: 3 }
    );
    // A longer name with this one as prefix has its own log.
    seq(append(format!("{r}/more"), 1, b"other").await);
    assert_eq!(
        fence.write(&r, 7, b"x").await.unwrap(),
        FenceOutcome::Accepted
    );
    assert_eq!(
        append(r.clone(), 6, b"stale").await,
        AppendOutcome::Rejected { highest: 7 }
    );
    let third = seq(append(r.clone(), 8, b"with space").await);
    match fence.numbering() {
        Numbering::Contiguous => assert_eq!((first, second, third), (1, 2, 3)),
        Numbering::Increasing => assert!(first < second && second < third),
    }
    // A register first written by `write` takes appends too.
    let w = resource("log-after-write");
    assert_eq!(
        fence.write(&w, 4, b"x").await.unwrap(),
        FenceOutcome::Accepted
    );
    let after_write = seq(append(w.clone(), 4, b"four").await);
    if fence.numbering() == Numbering::Contiguous {
        assert_eq!(after_write, 1);
    }
    let entry = |seq, token, value: &[u8]| LogEntry {
        seq,
        token,
        value: value.to_vec(),
    };
    assert_eq!(
        fence.log(&r).await.unwrap(),
        vec![
            entry(first, 3, b"three"),
            entry(second, 3, b"three again"),
            entry(third, 8, b"with space"),
        ]
    );
    assert_eq!(
        fence.log(&w).await.unwrap(),
        vec![entry(after_write, 4, b"four")]
    );
    assert_eq!(
        fence.read(&r).await.unwrap().map(|f| f.token),
        Some(8),
        "the register's token follows appends"
    );
}

/// Eight appenders race on a fresh resource with tokens 1..=8: every
/// accepted entry is in the log under its number with its token, a
/// refusal names a higher token, and the tokens never decrease along the
/// log. Outcome-unknown and transient errors (contention on Cassandra's
/// Paxos) are allowed; the log is then checked all the same.
pub async fn racing_appends_keep_token_order(fence: DynFence) {
    let r = resource("race-log");
    let appends: Vec<_> = (1..=8u64)
        .map(|t| {
            let (fence, r) = (fence.clone(), r.clone());
            tokio::spawn(async move { (t, fence.append(&r, t, t.to_string().as_bytes()).await) })
        })
        .collect();
    let mut accepted = Vec::new();
    for append in appends {
        match append.await.unwrap() {
            (t, Ok(AppendOutcome::Appended { seq })) => accepted.push((seq, t)),
            (t, Ok(AppendOutcome::Rejected { highest })) => {
                assert!(highest > t, "token {t} rejected by {highest}");
            }
            (_, Err(err)) => assert_ne!(err.kind(), ErrorKind::Permanent, "{err}"),
        }
    }
    // The highest token is never refused: after the race it is accepted.
    let last = fence.append(&r, 8, b"8 again").await.unwrap();
    accepted.push((last.seq().expect("token 8 refused after the race"), 8));
    let log = fence.log(&r).await.unwrap();
    for pair in log.windows(2) {
        assert!(pair[0].seq < pair[1].seq, "log out of order: {log:?}");
        assert!(
            pair[0].token <= pair[1].token,
            "a lower token follows a higher one: {log:?}"
        );
    }
    for (seq, t) in accepted {
        assert!(
            log.iter().any(|e| e.seq == seq && e.token == t),
            "accepted ({seq}, token {t}) is not in the log: {log:?}"
        );
    }
    for e in &log {
        let token = e.value.split(|b| *b == b' ').next().unwrap();
        assert_eq!(token, e.token.to_string().as_bytes(), "{e:?}");
    }
}

/// A token above `i64::MAX` is either compared exactly (accepted on a
/// fresh resource, then the highest) or refused with a permanent error
/// that changed nothing: never truncated or wrapped.
pub async fn tokens_beyond_i64_are_exact_or_refused(fence: DynFence) {
    let r = resource("huge");
    match fence.write(&r, u64::MAX, b"max").await {
        Ok(outcome) => {
            assert_eq!(outcome, FenceOutcome::Accepted);
            assert_eq!(
                fence.write(&r, u64::MAX - 1, b"max-1").await.unwrap(),
                FenceOutcome::Rejected { highest: u64::MAX }
            );
            assert_eq!(
                fence.read(&r).await.unwrap(),
                Some(Fenced {
                    token: u64::MAX,
                    value: b"max".to_vec()
                })
            );
        }
        Err(err) => {
            assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
            assert_eq!(fence.read(&r).await.unwrap(), None);
            let append = fence.append(&r, u64::MAX, b"max").await.unwrap_err();
            assert_eq!(append.kind(), ErrorKind::Permanent, "{append}");
            assert!(fence.log(&r).await.unwrap().is_empty());
            // The resource still works with tokens it can store.
            assert_eq!(
                fence.write(&r, 1, b"one").await.unwrap(),
                FenceOutcome::Accepted
            );
        }
    }
}

/// The case of a driver's guarded write of a key of the caller's (etcd's
/// and Valkey's `set(resource, token, key, value)`, beside the register of
/// [`Fence::write`](crate::Fence::write)): tokens at or above the highest
/// seen for `resource` are accepted, a lower one is refused and leaves the
/// key unchanged (`read(key)` reads it from the engine), and sixteen racing
/// writers of `<key>/race` leave the highest token's value.
pub async fn guarded_key_case<Set, SetFut, Read, ReadFut>(
    resource: &str,
    key: &str,
    set: Set,
    read: Read,
) where
    Set: Fn(String, u64, String, Vec<u8>) -> SetFut + Clone + Send + 'static,
    SetFut: std::future::Future<Output = ttl_storage::Result<FenceOutcome>> + Send + 'static,
    Read: Fn(String) -> ReadFut,
    ReadFut: std::future::Future<Output = Option<Vec<u8>>>,
{
    let write =
        |token: u64, value: &[u8]| set(resource.to_owned(), token, key.to_owned(), value.to_vec());
    let big = (1u64 << 60) + 1;
    for (token, value, outcome, then) in [
        (5, "five", FenceOutcome::Accepted, "five"),
        (3, "three", FenceOutcome::Rejected { highest: 5 }, "five"),
        (5, "again", FenceOutcome::Accepted, "again"),
        (10, "ten", FenceOutcome::Accepted, "ten"),
        (9, "nine", FenceOutcome::Rejected { highest: 10 }, "ten"),
        (big, "big", FenceOutcome::Accepted, "big"),
        (
            big - 1,
            "big-1",
            FenceOutcome::Rejected { highest: big },
            "big",
        ),
    ] {
        assert_eq!(
            write(token, value.as_bytes()).await.unwrap(),
            outcome,
            "token {token}"
        );
        assert_eq!(
            read(key.to_owned()).await.as_deref(),
            Some(then.as_bytes()),
            "after token {token}"
        );
    }

    // Racing writers: the highest token always has the last word.
    let (other, race) = (format!("{resource}/race"), format!("{key}/race"));
    let writes: Vec<_> = (1..=16u64)
        .map(|token| {
            let (set, other, race) = (set.clone(), other.clone(), race.clone());
            tokio::spawn(
                async move { set(other, token, race, token.to_string().into_bytes()).await },
            )
        })
        .collect();
    for write in writes {
        write.await.unwrap().unwrap();
    }
    assert_eq!(read(race).await.as_deref(), Some(&b"16"[..]));
}
