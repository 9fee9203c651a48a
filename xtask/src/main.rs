//! `cargo xtask`: project chores.

fn main() -> anyhow::Result<()> {
    let task = std::env::args().nth(1);
    match task.as_deref() {
        Some(other) => anyhow::bail!("unknown task {other:?}; try `cargo xtask help`"),
        None => {
            println!("cargo xtask <task>\n\ntasks: (none yet)");
            Ok(())
        }
    }
}
