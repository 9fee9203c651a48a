//! Result hooks: code of the application that sees every forwarded call's
//! outcome (for audit logs, per-destination accounting, circuit breakers).

use std::time::Duration;

use http::{Method, StatusCode};

use super::forward::ForwardError;
use crate::ids::{MemberId, RequestId};

/// What became of one forwarding attempt. A call retried on another member
/// after a refused connection produces two results.
#[derive(Debug)]
#[non_exhaustive]
pub struct CallResult<'a> {
    /// The request id the pod saw.
    pub request_id: &'a RequestId,
    /// The member the call went to.
    pub member: &'a MemberId,
    /// The request's method.
    pub method: &'a Method,
    /// The request's path (it names the destination or lock).
    pub path: &'a str,
    /// The pod's status, when it answered.
    pub status: Option<StatusCode>,
    /// Why no answer came, when none did.
    pub error: Option<&'a ForwardError>,
    /// From sending the request to the response headers (or the failure).
    pub elapsed: Duration,
}

/// Called once per forwarding attempt, on the request's task, after the
/// response headers arrived or the attempt failed and before the answer
/// goes back to the caller: keep it short and non-blocking (hand heavy work
/// to a channel). A panic in a hook is the application's bug and ends the
/// request's task.
///
/// Closures are hooks:
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use coordinator::http::{CallResult, ResultHook};
///
/// let failures = Arc::new(AtomicUsize::new(0));
/// let counted = failures.clone();
/// let hook = move |result: &CallResult<'_>| {
///     if result.status.is_none_or(|s| s.is_server_error()) {
///         counted.fetch_add(1, Ordering::Relaxed);
///     }
/// };
/// let _hook: Arc<dyn ResultHook> = Arc::new(hook);
/// ```
pub trait ResultHook: Send + Sync + 'static {
    /// Sees one attempt's result.
    fn on_result(&self, result: &CallResult<'_>);
}

impl<F> ResultHook for F
where
    F: Fn(&CallResult<'_>) + Send + Sync + 'static,
{
    fn on_result(&self, result: &CallResult<'_>) {
        self(result);
    }
}
