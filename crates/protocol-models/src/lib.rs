//! Model checks of the project's safety protocols, with
//! [stateright](https://docs.rs/stateright).
//!
//! Each protocol is a [`stateright::Model`] in a module of its own: the
//! actors, the store's records, the faults (lost and late-applied writes,
//! crashes, expiry, restarts under the same id), and the invariants as
//! `always` properties. Every model also names **seeded bugs**: variants of
//! the protocol as it was before a fix, which the checker must refute with a
//! counterexample trace. A model that cannot find its seeded bugs proves
//! nothing, so the tests check both directions.
//!
//! Run them with `cargo xtask model` (all models, then every seeded bug), or
//! one at a time with `cargo run --release -p protocol-models -- <model>
//! [--bug NAME]`. [`run::check`] explores a model breadth-first and returns
//! a [`run::Outcome`]: the states explored and the first violated property
//! with its trace.
//!
//! | model | module | invariant | seeded bugs |
//! |---|---|---|---|
//! | `ownership` | [`ownership`] | outside fan-out, one pod admits a destination's calls at a time | [`ownership::Bug`] |
//! | `handover` | [`handover`] | one holder acts per key; a hand-over request is acted on at most once and answered truthfully | [`handover::Bug`] |

pub mod handover;
pub mod ownership;
pub mod run;
pub mod shortest;
