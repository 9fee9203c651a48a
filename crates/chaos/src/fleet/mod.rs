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
//! - a pod is SIGKILLed and restarted at its old address, every other time
//!   under the same member id after hanging (SIGSTOP) for `1.5 × ttl`:
//!   its record expires and its destinations move meanwhile, but calls to
//!   it hang rather than being refused, so coordinators keep its routes
//!   cached and the new process gets them; else at once under a new id;
//! - a pod is SIGSTOPped for `1.5 × ttl` and SIGCONTed: calls queued in its
//!   socket run after its record expired and its destinations moved;
//! - a coordinator is SIGKILLed and restarted;
//! - a destination is deregistered (`DELETE /destinations/{d}` through the
//!   first coordinator: its pod tears it down and leaves it), and claimed
//!   again by the next call, while the other coordinator may still route
//!   it to the pod that left;
//! - and all along, the first coordinator reaches Valkey through a
//!   delay proxy (`delay_proxy.rs`) that delays its replies (100-800 ms each)
//!   for a TTL, then not for half a TTL, in turn: its read of a destination
//!   and the claim it sends on that read are seconds apart, with heartbeats,
//!   record expiries and the other coordinator's claims in between. The
//!   second coordinator's address policy rejects the first pod slot's
//!   port (two policies: it never forwards to that pod, and must never take
//!   its destinations either).
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
mod delay_proxy;
mod faults;
pub mod history;
mod load;
mod procs;
mod run;

pub use args::SharedValkey;
pub use load::LoadCounts;
pub use run::{FleetConfig, FleetReport, run};
