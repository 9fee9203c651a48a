//! A request body that can be retried until first polled (so a forward that
//! failed to connect can go to another pod with the same, unbuffered body).
//! The cap on a body's size is `http_body_util::Limited` (in `call.rs`).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// A request body held aside so a forward that fails to connect (and so
/// never polled the body) can be retried with the same body, unbuffered.
pub(crate) struct RetryableBody {
    slot: Arc<Mutex<Option<Body>>>,
    hint: SizeHint,
    end: bool,
}

impl RetryableBody {
    pub(crate) fn new(body: Body) -> Self {
        use http_body::Body as _;
        Self {
            hint: body.size_hint(),
            end: body.is_end_stream(),
            slot: Arc::new(Mutex::new(Some(body))),
        }
    }

    /// A body for one attempt; it takes the real body on its first poll.
    pub(crate) fn attempt(&self) -> OnceBody {
        OnceBody {
            slot: self.slot.clone(),
            body: None,
            hint: self.hint,
            end: self.end,
        }
    }

    /// Whether another attempt can send the whole body: none has started
    /// sending it yet, or it is empty.
    pub(crate) fn can_resend(&self) -> bool {
        self.end || self.is_untouched()
    }

    /// Whether no attempt has started sending the body yet.
    pub(crate) fn is_untouched(&self) -> bool {
        self.slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

/// One attempt's view of a [`RetryableBody`].
pub(crate) struct OnceBody {
    slot: Arc<Mutex<Option<Body>>>,
    body: Option<Body>,
    hint: SizeHint,
    end: bool,
}

impl OnceBody {
    /// An empty body (for cancel messages).
    pub(crate) fn empty() -> Self {
        RetryableBody::new(Body::empty()).attempt()
    }
}

impl http_body::Body for OnceBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.body.is_none() {
            let taken = self.slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            match taken {
                Some(b) => self.body = Some(b),
                None if self.end => return Poll::Ready(None),
                None => {
                    return Poll::Ready(Some(Err(axum::Error::new(
                        "request body already consumed by an earlier attempt",
                    ))));
                }
            }
        }
        match self.body.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.body {
            Some(b) => b.is_end_stream(),
            None => self.end,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Some(b) => b.size_hint(),
            None => self.hint,
        }
    }
}
