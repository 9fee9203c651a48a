//! The response body wrapper: a pod's body that sends a cancel message to
//! the pod when dropped before its end.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use super::forward::CancelGuard;
use super::pool::PodBody;

/// An upstream response body carrying the call's [`CancelGuard`]: reaching
/// the end disarms it; dropping the body early (client gone) fires it.
pub(crate) struct GuardedBody {
    inner: PodBody,
    guard: Option<CancelGuard>,
}

impl GuardedBody {
    pub(crate) fn new(inner: PodBody, guard: CancelGuard) -> Self {
        use http_body::Body as _;
        let mut guard = Some(guard);
        if inner.is_end_stream()
            && let Some(g) = guard.take()
        {
            g.disarm();
        }
        Self { inner, guard }
    }
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        // Servers stop polling once `is_end_stream` holds, so the end is
        // either a `None` frame or a data frame after which the body is done.
        let ended = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => self.inner.is_end_stream(),
            _ => false,
        };
        if ended && let Some(g) = self.guard.take() {
            g.disarm();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
