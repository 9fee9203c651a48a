//! The fence's cases (see `main.rs` for how to run them).

use super::*;

/// The fence refuses transactions with a token lower than the highest
/// recorded, and serializes fenced transactions on one resource: a lower
/// token that waited for a higher one's commit is refused.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn fence_refuses_lower_tokens() {
    use storage_postgres::fence::PostgresFence;
    let s = connect_url(&base_url()).await;
    let fence = PostgresFence::create(&s, "suite_fences").await.unwrap();
    let resource = unique("resource");
    let setup = s.pool().get().await.unwrap();
    setup
        .batch_execute("CREATE TABLE IF NOT EXISTS suite_fenced (id text PRIMARY KEY, v text)")
        .await
        .unwrap();
    let write = |token: u64, value: &'static str| {
        let (pool, fence, resource) = (s.pool().clone(), fence.clone(), resource.clone());
        async move {
            let mut client = pool.get().await.unwrap();
            let tx = client.transaction().await.unwrap();
            if !fence.check(&tx, &resource, token).await.unwrap() {
                return false;
            }
            tx.execute(
                "INSERT INTO suite_fenced (id, v) VALUES ($1, $2) \
                 ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
                &[&resource, &value],
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            true
        }
    };
    let read = || async {
        let row = setup
            .query_one("SELECT v FROM suite_fenced WHERE id = $1", &[&resource])
            .await
            .unwrap();
        row.get::<_, String>(0)
    };
    assert!(write(5, "five").await);
    assert!(!write(3, "three").await);
    assert_eq!(read().await, "five");
    assert!(write(5, "again").await);
    assert!(write(7, "seven").await);
    assert_eq!(fence.highest(&setup, &resource).await.unwrap(), Some(7));

    // Token 9 holds the fence row; token 8 waits for it, then is refused.
    let mut holder = s.pool().get().await.unwrap();
    let tx9 = holder.transaction().await.unwrap();
    assert!(fence.check(&tx9, &resource, 9).await.unwrap());
    let waiting = tokio::spawn(write(8, "eight"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "token 8 did not wait for token 9's transaction"
    );
    tx9.commit().await.unwrap();
    assert!(!waiting.await.unwrap());
    assert_eq!(read().await, "seven");
    assert_eq!(fence.highest(&setup, &resource).await.unwrap(), Some(9));
}

/// `PostgresFence::append` inside the caller's transaction: an append
/// rolled back leaves neither its entry nor its token, and the next
/// committed append takes its number. The shared `fence_suite` covers
/// the rest of the contract (through committed transactions).
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn fenced_append_rolled_back_leaves_nothing() {
    use storage_postgres::fence::{AppendOutcome, LogEntry, PostgresFence};
    let s = connect_url(&base_url()).await;
    let fence = PostgresFence::create(&s, "suite_fences").await.unwrap();
    let resource = unique("log");
    let append = |token: u64, value: &'static [u8], commit: bool| {
        let (pool, fence, resource) = (s.pool().clone(), fence.clone(), resource.clone());
        async move {
            let mut client = pool.get().await.unwrap();
            let tx = client.transaction().await.unwrap();
            let outcome = fence.append(&tx, &resource, token, value).await.unwrap();
            if commit && matches!(outcome, AppendOutcome::Appended { .. }) {
                tx.commit().await.unwrap();
            }
            outcome
        }
    };
    assert_eq!(
        append(3, b"three", true).await,
        AppendOutcome::Appended { seq: 1 }
    );
    // Rolled back: neither the entry nor the token stays.
    assert_eq!(
        append(9, b"rolled back", false).await,
        AppendOutcome::Appended { seq: 2 }
    );
    assert_eq!(
        append(5, b"five", true).await,
        AppendOutcome::Appended { seq: 2 }
    );
    assert_eq!(
        append(4, b"stale", true).await,
        AppendOutcome::Rejected { highest: 5 }
    );
    let client = s.pool().get().await.unwrap();
    let entry = |seq, token, value: &[u8]| LogEntry {
        seq,
        token,
        value: value.to_vec(),
    };
    assert_eq!(
        fence.log(&client, &resource).await.unwrap(),
        vec![entry(1, 3, b"three"), entry(2, 5, b"five")]
    );
}
