//! Coordinator chaos: real pod and coordinator processes on one real
//! Valkey, a client load, and faults from outside; then a history check
//! that no destination was served by two pods at once.
//!
//! [`run()`] starts `pods` `chaos-pod` processes (each a `coordinator::Member`
//! behind the public ownership fence, `coordinator::http::pod::fenced`,
//! reaching Valkey through its own [`FaultProxy`](crate::proxy::FaultProxy))
//! and `coordinators` `chaos-coordinator` processes (the crate's routes,
//! reaching Valkey and the pods directly). Workers call
//! `GET /destinations/{d}/work` on random destinations through random
//! coordinators with `coordinator::client`. Two destinations (`fan-0`,
//! `fan-1`) are bound to two pods each (fanned out: shared on purpose, left
//! out of the overlap check). Meanwhile, in turn:
//!
//! - a pod is cut from Valkey only (its proxy; the coordinators still reach
//!   it) for `1.5 × ttl`: it cannot heartbeat, its record expires, its
//!   destinations move, while coordinators with a warm cache keep sending
//!   it calls;
//! - a pod is SIGKILLed and restarted (under a new member id);
//! - a pod is SIGSTOPped for `1.5 × ttl` and SIGCONTed: calls queued in its
//!   socket run after its record expired and its destinations moved;
//! - a coordinator is SIGKILLed and restarted.
//!
//! Every pod appends each call it served (destination, pod, epoch, start and
//! end in wall-clock microseconds) and each stale-owner refusal to its
//! history file ([`history`]); [`history::check_history`] then finds every
//! call that started while another pod was serving the same destination.
//!
//! With `unfenced` the pods run without the fence (the negative control):
//! the run must then find overlaps.
//!
//! ## Assumptions
//!
//! One host: every process reads the same wall clock, so timestamps
//! compare. A pod's handler re-checks its ownership after its work, before
//! it records the call as served (see the `chaos-pod` binary): the fence
//! admits a call; a handler that keeps a result (a write) must check again,
//! since a call admitted before a pause can resume after the lease ran out.
//! Calls cut short by a SIGKILL are not recorded (their work is lost with
//! the process).

mod args;
pub mod history;
mod load;
mod procs;
mod run;

pub use args::SharedValkey;
pub use load::LoadCounts;
pub use run::{FleetConfig, FleetReport, run};
