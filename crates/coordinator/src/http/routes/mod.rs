//! The coordinator's routes, one file per route (as mini-redis has a file
//! per command): each holds the route's public method on
//! [`Coordinator`] and its axum handler. The handlers read ids with the
//! crate's extractors ([`extract`](super::extract)), ask the
//! [`Registry`](crate::Registry) which member serves the call and forward
//! it ([`call`](super::call)).

mod bind;
mod cancel;
mod deregister;
mod lock;
mod proxy;
mod register;

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::{any, post, put};

use super::call::counted;
use super::coordinator::Coordinator;
use super::errors::ApiError;

impl Coordinator {
    /// The ready-made routes:
    ///
    /// | route | handler |
    /// |---|---|
    /// | `POST /destinations` | [`Coordinator::register_from_response`] |
    /// | `PUT /destinations/{destination}` | [`Coordinator::pick_and_register`] |
    /// | `DELETE /destinations/{destination}` | [`Coordinator::lookup_and_deregister`] |
    /// | any other `/destinations/{destination}[/...]` | [`Coordinator::lookup_and_proxy`] |
    /// | any `/locks/{lock}[/...]` | [`Coordinator::lookup_lock_and_proxy`] |
    /// | `POST /cancel/{request_id}` | [`Coordinator::cancel`] (204 / 404) |
    ///
    /// The original path and query are forwarded unchanged.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/destinations", post(register::handler))
            .route(
                "/destinations/{destination}",
                put(bind::handler)
                    .delete(deregister::handler)
                    .fallback(proxy::handler),
            )
            .route("/destinations/{destination}/{*rest}", any(proxy::handler))
            .route("/locks/{lock}", any(lock::handler))
            .route("/locks/{lock}/{*rest}", any(lock::handler))
            .route("/cancel/{request_id}", post(cancel::handler))
            .fallback(|| async { counted("none", ApiError::NoRoute.into_response()) })
            .with_state(self.clone())
    }
}
