//! Fencing-token cases: tokens increase across holders and survive restarts
//! and expiry.
use elections::fencing;

use crate::{Ctx, ctx::sleep};

use super::elections::acquire;

/// Fencing tokens strictly increase from holder to holder.
pub async fn elections_fencing_tokens_increase_across_holders(ctx: Ctx) {
    let d = ctx.lease();
    let (a, _ka) = ctx.elections();
    let (b, _kb) = ctx.elections();
    let k = ctx.key("leader");
    let mut last = 0;
    for round in 0..3 {
        for (e, name) in [(&a, "a"), (&b, "b")] {
            let l = acquire(e, &k, name, d).await;
            assert!(
                l.fencing_token() > last,
                "round {round}: {} <= {last}",
                l.fencing_token()
            );
            last = l.fencing_token();
            e.release_leadership(&k).await;
        }
    }
    a.cleanup().await;
    b.cleanup().await;
}

/// Fencing tokens survive restarts of the elections object and expiry of
/// the leadership record.
pub async fn elections_fencing_tokens_survive_restart(ctx: Ctx) {
    let d = ctx.lease();
    let k = ctx.key("leader");
    let (e1, _k1) = ctx.elections();
    let t1 = acquire(&e1, &k, "one", d).await.fencing_token();
    e1.cleanup().await;
    drop(e1);
    let (e2, _k2) = ctx.elections();
    let t2 = acquire(&e2, &k, "two", d).await.fencing_token();
    assert!(t2 > t1);
    // Crash without release: drop, let the record expire.
    drop(e2);
    sleep(d + ctx.slack()).await;
    assert_eq!(ctx.storage.get(&k).await.unwrap(), None);
    let (e3, _k3) = ctx.elections();
    let t3 = acquire(&e3, &k, "three", d).await.fencing_token();
    assert!(t3 > t2);
    let counter = fencing::counter_key(&k).unwrap();
    assert_eq!(
        ctx.storage.get(&counter).await.unwrap(),
        Some(t3.to_string().into_bytes())
    );
    e3.cleanup().await;
}
