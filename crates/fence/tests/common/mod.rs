//! The cases every fence runs on its real engine.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

use fence::{AppendVerdict, FenceError, Fenced, LogEntry, Verdict};

/// A fenced register on some engine.
pub trait Register {
    async fn write(&self, resource: &str, token: u64, value: &[u8]) -> Result<Verdict, FenceError>;
    async fn read(&self, resource: &str) -> Result<Option<Fenced>, FenceError>;
}

/// A fenced log on some engine.
pub trait Log: Register {
    async fn append(
        &self,
        resource: &str,
        token: u64,
        value: &[u8],
    ) -> Result<AppendVerdict, FenceError>;
    async fn log(&self, resource: &str) -> Result<Vec<LogEntry>, FenceError>;
}

/// Appends are numbered 1, 2, … in accept order; a lower token than the
/// highest seen (by an append or a register write: they share the fence)
/// is refused and leaves no entry; the log reads back exactly the
/// appended entries.
pub async fn appends_in_order(fence: &impl Log) {
    let r = resource("log");
    assert!(fence.log(&r).await.unwrap().is_empty());
    assert_eq!(
        fence.append(&r, 3, b"three").await.unwrap(),
        AppendVerdict::Appended { seq: 1 }
    );
    assert_eq!(
        fence.append(&r, 3, b"again").await.unwrap(),
        AppendVerdict::Appended { seq: 2 }
    );
    assert_eq!(
        fence.append(&r, 2, b"stale").await.unwrap(),
        AppendVerdict::Rejected { highest_seen: 3 }
    );
    assert_eq!(fence.write(&r, 7, b"x").await.unwrap(), Verdict::Accepted);
    assert_eq!(
        fence.append(&r, 6, b"stale").await.unwrap(),
        AppendVerdict::Rejected { highest_seen: 7 }
    );
    assert_eq!(
        fence.append(&r, 8, b"eight").await.unwrap(),
        AppendVerdict::Appended { seq: 3 }
    );
    // A register first written by `write` takes appends too.
    let w = resource("log-after-write");
    assert_eq!(fence.write(&w, 4, b"x").await.unwrap(), Verdict::Accepted);
    assert_eq!(
        fence.append(&w, 4, b"four").await.unwrap(),
        AppendVerdict::Appended { seq: 1 }
    );
    let entry = |seq, token, value: &[u8]| LogEntry {
        seq,
        token,
        value: value.to_vec(),
    };
    assert_eq!(
        fence.log(&r).await.unwrap(),
        vec![
            entry(1, 3, b"three"),
            entry(2, 3, b"again"),
            entry(3, 8, b"eight")
        ]
    );
    assert_eq!(fence.log(&w).await.unwrap(), vec![entry(1, 4, b"four")]);
}

/// A resource id unique to this run.
pub fn resource(case: &str) -> String {
    format!("{case}-{:016x}", rand::random::<u64>())
}

/// Lower tokens are refused, equal and higher ones accepted, and the
/// register keeps the value of the highest accepted write.
pub async fn orders_tokens(fence: &impl Register) {
    let r = resource("order");
    assert_eq!(fence.read(&r).await.unwrap(), None);
    assert_eq!(
        fence.write(&r, 5, b"five").await.unwrap(),
        Verdict::Accepted
    );
    assert_eq!(
        fence.write(&r, 5, b"five again").await.unwrap(),
        Verdict::Accepted
    );
    assert_eq!(
        fence.write(&r, 7, b"seven").await.unwrap(),
        Verdict::Accepted
    );
    assert_eq!(
        fence.write(&r, 6, b"zombie").await.unwrap(),
        Verdict::Rejected { highest_seen: 7 }
    );
    assert_eq!(
        fence.write(&r, 1, b"older zombie").await.unwrap(),
        Verdict::Rejected { highest_seen: 7 }
    );
    assert_eq!(
        fence.read(&r).await.unwrap(),
        Some(Fenced {
            token: 7,
            value: b"seven".to_vec()
        })
    );
    // Other resources are independent.
    let other = resource("order-other");
    assert_eq!(
        fence.write(&other, 1, b"one").await.unwrap(),
        Verdict::Accepted
    );
}

/// Sixteen writers race on a fresh resource with tokens 1..=16: the
/// highest is always accepted, and the register ends with its value.
pub async fn racing_writers_leave_the_highest(fence: &impl Register) {
    for _round in 0..3 {
        let r = resource("race");
        let writes = (1..=16u64).map(|t| {
            let r = r.clone();
            async move {
                (
                    t,
                    fence.write(&r, t, t.to_string().as_bytes()).await.unwrap(),
                )
            }
        });
        let verdicts = futures_join_all(writes).await;
        let (_, top) = verdicts.iter().find(|(t, _)| *t == 16).unwrap();
        assert_eq!(*top, Verdict::Accepted);
        for (t, verdict) in &verdicts {
            if let Verdict::Rejected { highest_seen } = verdict {
                assert!(highest_seen > t, "token {t} rejected by {highest_seen}");
            }
        }
        assert_eq!(
            fence.read(&r).await.unwrap(),
            Some(Fenced {
                token: 16,
                value: b"16".to_vec()
            })
        );
    }
}

/// Polls every future to completion concurrently, on this task.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|v| v.unwrap()).collect()
}
