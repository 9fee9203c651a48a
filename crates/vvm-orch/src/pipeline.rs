//! [`ServicePipeline`]: the work a VVM runs while it leads.

use std::{fmt, sync::Arc};

use tokio_util::{
    sync::{CancellationToken, WaitForCancellationFuture},
    task::TaskTracker,
};
use ttl_storage::{BoxError, Key};

/// The application services a VVM runs once it leads (the design's
/// ServicePipeline).
///
/// [`run`](Self::run) is called once, after leadership is acquired. It must
/// return soon after [`ServiceContext::shutdown_requested`] fires, which
/// happens when the VVM shuts down or loses leadership. An `Err` becomes the
/// VVM's problem; returning `Ok` before shutdown was requested is reported
/// as [`crate::VvmProblem::ServicesFinished`].
///
/// Leadership is released only after `run` has returned, so work done
/// inside `run` never overlaps another leader's (assuming the process is not
/// paused past the lease; see the `elections` crate for the killer and
/// fencing tokens, which cover that case).
pub trait ServicePipeline: Send + Sync + 'static {
    /// The error `run` may fail with.
    type Error: Into<BoxError> + Send + 'static;

    /// Runs the services until `ctx` asks them to stop.
    fn run(&self, ctx: ServiceContext) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// What the services get: the stop signal and the leadership they run under.
#[derive(Clone)]
pub struct ServiceContext {
    pub(crate) shutdown: CancellationToken,
    pub(crate) key: Key,
    pub(crate) key_index: u32,
    pub(crate) fencing_token: u64,
    pub(crate) value: Arc<str>,
    pub(crate) record: Arc<[u8]>,
    pub(crate) tasks: TaskTracker,
}

impl ServiceContext {
    /// Fired when the services must stop: VVM shutdown or leadership loss.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Completes when the services must stop.
    pub fn shutdown_requested(&self) -> WaitForCancellationFuture<'_> {
        self.shutdown.cancelled()
    }

    /// True once the services must stop.
    pub fn is_shutdown_requested(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// The leadership key this VVM holds.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The index of that key, in `1..=cluster_size`.
    pub fn key_index(&self) -> u32 {
        self.key_index
    }

    /// This VVM's value (see [`crate::Vvm::value`]).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The exact bytes of the leadership record: the value and the
    /// leadership's unique nonce (see [`elections::record`]).
    pub fn record_value(&self) -> &[u8] {
        &self.record
    }

    /// The fencing token of this leadership: pass it with every write to a
    /// resource that must reject a stale leader.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// Spawns a task that belongs to the services: the VVM's shutdown waits
    /// for it, like for [`ServicePipeline::run`], before leadership is
    /// released, and the elections killer stays armed until it has ended.
    /// The task should watch [`shutdown_requested`](Self::shutdown_requested)
    /// and return soon after it fires.
    ///
    /// A task started with a plain `tokio::spawn` is **outside** the
    /// guarantee: it can run on while the next leader starts. Use this for
    /// every task that works as the leader.
    ///
    /// ```
    /// use vvm_orch::{ServiceContext, service_fn};
    ///
    /// let pipeline = service_fn(|ctx: ServiceContext| async move {
    ///     let worker = ctx.clone();
    ///     ctx.spawn(async move {
    ///         // background work as leader, until told to stop
    ///         worker.shutdown_requested().await;
    ///     });
    ///     ctx.shutdown_requested().await;
    ///     Ok::<_, std::io::Error>(())
    /// });
    /// # let _ = pipeline;
    /// ```
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }
}

impl fmt::Debug for ServiceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceContext")
            .field("key", &self.key)
            .field("fencing_token", &self.fencing_token)
            .field("shutdown_requested", &self.is_shutdown_requested())
            .finish()
    }
}

/// A [`ServicePipeline`] made of a closure; see [`service_fn`].
pub struct ServiceFn<F>(F);

/// Makes a [`ServicePipeline`] of a closure taking the [`ServiceContext`].
///
/// ```
/// use vvm_orch::{ServiceContext, service_fn};
///
/// let pipeline = service_fn(|ctx: ServiceContext| async move {
///     ctx.shutdown_requested().await;
///     Ok::<_, std::io::Error>(())
/// });
/// # let _ = pipeline;
/// ```
pub fn service_fn<F, Fut, E>(f: F) -> ServiceFn<F>
where
    F: Fn(ServiceContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<BoxError> + Send + 'static,
{
    ServiceFn(f)
}

impl<F, Fut, E> ServicePipeline for ServiceFn<F>
where
    F: Fn(ServiceContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<BoxError> + Send + 'static,
{
    type Error = E;

    fn run(&self, ctx: ServiceContext) -> impl Future<Output = Result<(), E>> + Send {
        (self.0)(ctx)
    }
}
