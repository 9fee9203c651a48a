//! The requester's side of a hand-over, in one place (`vvm_orch::handover`):
//! a request to whoever leads key 1, its answer as text, its withdrawal.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

use std::{sync::Arc, time::Duration};

use ttl_storage::TtlStorage;
use vvm_orch::{
    VvmConfig,
    handover::{Answer, Request, Requester, State, Withdrawal},
};

/// A posted request.
pub struct Asked {
    requester: Requester,
    request: Request,
}

fn text(answer: &Answer) -> String {
    match answer {
        Answer::HandedOver(to) => format!("handed-over {to}"),
        Answer::NoCandidate => "no-candidate".to_owned(),
        Answer::Failed(why) => format!("failed: {why}"),
        Answer::Released(why) => format!("released: {why}"),
        other => format!("{other:?}"),
    }
}

/// Posts a request to the leader of key 1 of `config`'s keys: hand over
/// to `to` (an address), or to anyone.
pub async fn ask(
    storage: impl TtlStorage + 'static,
    config: &VvmConfig,
    to: Option<&str>,
) -> Asked {
    let requester = Requester::new(Arc::new(storage), config, 1).unwrap();
    let leader = requester.leader().await.unwrap().expect("a leader");
    let request = Request::new(&leader, to);
    assert!(
        requester
            .post(&request, Duration::from_secs(60))
            .await
            .unwrap(),
        "busy"
    );
    Asked { requester, request }
}

impl Asked {
    /// The answer, once there is one (`None` before); an answer read is
    /// cleared, so the next request is not busy.
    pub async fn answer(&self) -> Option<String> {
        match self.requester.state(&self.request).await.unwrap() {
            State::Answered(answer) => {
                self.requester.done(&self.request).await;
                Some(text(&answer))
            }
            _ => None,
        }
    }

    /// Waits up to `limit` for the answer.
    pub async fn answer_within(&self, limit: Duration) -> Option<String> {
        let until = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < until {
            if let Some(answer) = self.answer().await {
                return Some(answer);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Withdraws it: `withdrawn` (nothing will happen) or `too late`.
    pub async fn withdraw(&self) -> String {
        match self.requester.withdraw(&self.request).await.unwrap() {
            Withdrawal::Withdrawn => "withdrawn".to_owned(),
            other => format!("too late: {other:?}"),
        }
    }
}
