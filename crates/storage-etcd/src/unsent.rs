//! Requests that never left: with several endpoints, etcd-client's
//! balanced channel can route a request to a member whose connection
//! cannot be opened (the member is down); the request fails with "tcp
//! connect error" before anything is sent. It is safe to send it again
//! (the balancer picks among the members again), writes included.

use std::future::Future;

use etcd_client::Error as EtcdError;
use tonic::Code;

/// How many times a request that was never sent is tried in all: with
/// one member of three down, the chance that every try lands on it is
/// below 1 in 2000.
pub(crate) const ATTEMPTS: usize = 8;

/// Whether `err` says the request could not be sent at all: the
/// connection to the member it was routed to could not be opened.
pub(crate) fn not_sent(err: &EtcdError) -> bool {
    match err {
        EtcdError::GRpcStatus(status) => {
            status.code() == Code::Unavailable && status.message().contains("tcp connect error")
        }
        _ => false,
    }
}

/// Runs `request` until it was sent (answered or failed otherwise), at
/// most [`ATTEMPTS`] times.
pub(crate) async fn retry<T, F, Fut>(mut request: F) -> Result<T, EtcdError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EtcdError>>,
{
    let mut tries = 1;
    loop {
        match request().await {
            Err(err) if not_sent(&err) && tries < ATTEMPTS => {
                tracing::debug!(%err, tries, "etcd request not sent (member unreachable); again");
                // A short pause (5, 10, ... 35 ms; 140 ms in all): the
                // balancer may pick the dead member again at once.
                tokio::time::sleep(std::time::Duration::from_millis(5 * tries as u64)).await;
                tries += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unsent_requests_are_tried_again_and_others_are_not() {
        let refused = || EtcdError::GRpcStatus(tonic::Status::unavailable("tcp connect error"));
        let mut calls = 0;
        let result: Result<u8, _> = retry(|| {
            calls += 1;
            let answer = if calls < 3 { Err(refused()) } else { Ok(7) };
            async move { answer }
        })
        .await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!(calls, 3);

        let mut calls = 0;
        let result: Result<u8, _> = retry(|| {
            calls += 1;
            async {
                Err(EtcdError::GRpcStatus(tonic::Status::unavailable(
                    "etcdserver: request timed out",
                )))
            }
        })
        .await;
        assert!(result.is_err());
        assert_eq!(
            calls, 1,
            "a request that may have been applied is never re-sent"
        );

        let mut calls = 0;
        let result: Result<u8, _> = retry(|| {
            calls += 1;
            async { Err(refused()) }
        })
        .await;
        assert!(not_sent(&result.unwrap_err()));
        assert_eq!(calls, ATTEMPTS);
    }
}
