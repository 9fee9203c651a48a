//! # vvm-orch
//!
//! The VVM lifecycle: run application services only while this process
//! holds leadership of one of `cluster_size` keys, and stop them cleanly.
//! A *VVM* (Voedger Virtual Machine, the name the design sources give it)
//! is one node's set of services that must run on at most one node per key
//! at any moment.
//! The Rust version of the design's VVM orchestration, with the
//! `vvm-host` program (the `vvm-host` crate) built on it.
//!
//! ```
//! use std::time::Duration;
//! use elections::RecordingKiller;
//! use storage_mem::MemStorage;
//! use vvm_orch::{ServiceContext, Vvm, VvmConfig, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let storage = MemStorage::new();
//! let pipeline = service_fn(|ctx: ServiceContext| async move {
//!     println!("leading {} with fencing token {}", ctx.key(), ctx.fencing_token());
//!     ctx.shutdown_requested().await; // work until asked to stop
//!     Ok::<_, std::io::Error>(())
//! });
//!
//! // Provide wires everything and launches nothing. Production code keeps
//! // the default killer, which exits the process; tests record instead.
//! let vvm = Vvm::provide(VvmConfig::new("10.0.0.7"), storage.clone(), pipeline)?
//!     .with_killer(RecordingKiller::new());
//! // Launch returns at once; the Launcher acquires leadership in the background.
//! let (vvm, problem) = vvm.launch();
//! let leader = vvm.wait_for_leadership().await.expect("the key is free");
//! assert_eq!(leader.key.as_str(), "vvm/leader/1");
//!
//! // A host waits for the problem signal or its own stop signal...
//! tokio::select! {
//!     () = problem.raised() => {}
//!     () = tokio::time::sleep(Duration::from_secs(60)) => {}
//! }
//! // ...then shuts down: services stop, then leadership is released.
//! vvm.shutdown().await?;
//! # use ttl_storage::TtlStorage;
//! assert_eq!(storage.get(&leader.key).await?, None);
//! # Ok(()) }
//! ```
//!
//! ## Lifecycle (typestate)
//!
//! [`Vvm::provide`] validates the [`VvmConfig`] and wires elections; it
//! launches nothing. [`Vvm::launch`] consumes the `Vvm`, starts the
//! **Launcher** task and returns a [`LaunchedVvm`] and the
//! [`ProblemSignal`] at once. [`LaunchedVvm::shutdown`] consumes the
//! launched VVM and returns the first problem. Launching twice or shutting
//! down a VVM that was never launched does not compile.
//!
//! The **Launcher** tries keys `1..=cluster_size` (named
//! `{key_prefix}{n}`) in turn, with this VVM's unique value (address, process
//! id, random suffix), pausing between rounds, until one is acquired or the
//! acquisition duration runs out ([`VvmProblem::LeadershipAcquisition`]).
//! Shutdown interrupts it at once. On success it starts the
//! **LeadershipMonitor** and the [`ServicePipeline`].
//!
//! Every failure goes through one path: the first problem is kept and fires
//! the [`ProblemSignal`] once; later ones are logged. Nothing blocks on it.
//! The VVM never shuts itself down: the host reacts to the signal by
//! calling [`LaunchedVvm::shutdown`]. On leadership loss, though, the
//! monitor tells the services to stop at once, without waiting for the host.
//!
//! ## Shutdown order, and why
//!
//! 1. **Signal shutdown.** The Launcher stops acquiring (an interrupted
//!    acquisition withdraws its own record, best effort); nothing new is
//!    started after this point.
//! 2. **Stop the services and wait for them**, and for every task they
//!    started with [`ServiceContext::spawn`]. The monitor still watches
//!    leadership meanwhile, so a loss during a slow stop is still reported.
//! 3. **Stop the monitor.**
//! 4. **Clean up elections**: release every leadership (delete the record,
//!    disarm the killer) and wait for the renewal and killer tasks. This is
//!    the safety-critical step: the key is released only *after* the
//!    services have stopped, so the next leader can never start while this
//!    one still works. (The design's text stops the monitor before the
//!    services; stopping it after them is what keeps step 2's losses
//!    visible.)
//! 5. **Wait for the Launcher.**
//! 6. **Mark shut down** ([`VvmStatus::ShutDown`]) and return the first problem.
//!
//! When `shutdown` returns, no task this VVM started is left (see
//! [`TaskProbe`]). The one intended exception is the design's: after a
//! leadership loss, the elections killer stays armed until step 4 releases
//! the key; if shutdown never gets there in time, the killer ends the process.
//!
//! ## Guarantees and assumptions
//!
//! - Services run only between a successful acquisition and the end of
//!   step 2, and leadership is released only after that. With the
//!   `elections` guarantees (linearizable storage, clocks within 20 % in
//!   rate), at most one VVM runs services per key at any moment, provided
//!   services stop when [`ServiceContext::shutdown_requested`] fires (the
//!   killer ends the process otherwise).
//! - Work the services hand to other tasks is covered only when those tasks
//!   are started with [`ServiceContext::spawn`]: a plain `tokio::spawn` is
//!   outside the guarantee and can run on while the next leader starts.
//! - Shutdown waits for the services without a time limit: a pipeline that
//!   ignores its stop signal makes shutdown hang (and, after a loss, is
//!   stopped by the killer).
//! - All tasks run on the Tokio runtime `launch` was called in.

mod cluster_size;
mod config;
pub mod handover;
pub mod keys;
mod launcher;
mod monitor;
mod pipeline;
mod problem;
mod shutdown;
mod status;
mod vvm;

pub use config::{
    ACQUIRE_FOREVER, ConfigError, DEFAULT_ACQUISITION_DURATION, DEFAULT_ACQUISITION_RETRY_PAUSE,
    DEFAULT_CLUSTER_SIZE, DEFAULT_KEY_PREFIX, DEFAULT_LEADERSHIP_DURATION, MAX_ADDRESS_LEN,
    MAX_CLUSTER_SIZE, VvmConfig,
};
pub use pipeline::{ServiceContext, ServiceFn, ServicePipeline, service_fn};
pub use problem::{ProblemSignal, VvmProblem};
pub use status::{LeaderInfo, TaskProbe, VvmStatus};
pub use vvm::{LaunchedVvm, Vvm};
