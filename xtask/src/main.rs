//! `cargo xtask`: project chores, in Rust, with no tools beyond cargo and the
//! JDK/Debian packages the engines need.
//!
//! - `cargo xtask test-drivers`: start every storage engine (or use the
//!   endpoints given in the environment), run each network driver's whole
//!   `elections-testsuite` against it, print a per-engine summary, tear down.
//!   With `--docker`, every engine runs in a container (`testcontainers`).
//! - `cargo xtask sim --seeds 10000`: the deterministic elections simulation.
//! - `cargo xtask chaos --engine cassandra --duration 120s`: contender processes
//!   killed, paused and cut off from a real engine, fencing checked.
//! - `cargo xtask model`: the protocol models (stateright), every seeded bug refuted.
//! - `cargo xtask tidy`: the map's invariants (`docs/architecture.md`), checked.
//! - `cargo xtask dist`: vvm-host's release tarball and `.deb`.
//! - `cargo xtask man`: writes vvm-host's man page (`crates/vvm-host/doc/vvm-host.1`).
//! - `cargo xtask bench scale --engine mem --keys 1000000`: many leaderships
//!   in one process, measured (`crates/elections-scale`).
//! - `cargo xtask build-kube-apiserver` (hidden): builds the `kube` engine's
//!   kube-apiserver ahead of `test-drivers` (CI runs it in the background).

mod bench;
mod cargo;
mod chaos;
mod dist;
mod docker;
mod engines;
mod man;
mod model;
mod sim;
mod test_drivers;
mod tidy;
mod workspace_build;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Project chores")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Start the real engines, run every network driver's suite against them, tear down.
    TestDrivers(test_drivers::Args),
    /// Run the deterministic elections simulation over many seeds (release build).
    Sim(sim::Args),
    /// Run contender processes under kills, pauses and partitions against a real engine.
    Chaos(chaos::Args),
    /// Check the protocol models exhaustively (release build); every seeded bug must be refuted.
    Model(model::Args),
    /// Check the architecture's invariants (crate arrows, file lengths, docs, driver lists, network suites).
    Tidy,
    /// Package vvm-host: a release tarball and a .deb (binary, man pages, completions).
    Dist(dist::Args),
    /// Write vvm-host's man page from its clap definition (a test checks it is current).
    Man,
    /// Benchmarks that need an engine or a process of their own (`bench scale`).
    Bench(bench::Args),
    /// Build (or find cached) the `kube` engine's kube-apiserver; CI runs it
    /// in the background so `test-drivers` finds it built.
    #[command(hide = true)]
    BuildKubeApiserver,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::TestDrivers(args) => test_drivers::run(args),
        Task::Sim(args) => sim::run(args),
        Task::Chaos(args) => chaos::run(args),
        Task::Model(args) => model::run(args),
        Task::Tidy => tidy::run(),
        Task::Dist(args) => dist::run(args),
        Task::Man => man::run(),
        Task::Bench(args) => bench::run(args),
        Task::BuildKubeApiserver => engines::build_kube_apiserver(),
    }
}
