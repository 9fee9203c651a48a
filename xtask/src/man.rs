//! `cargo xtask man`: vvm-host's man page, generated from the same clap
//! definition as its `--help` (`vvm-host man`, hidden, renders it with
//! clap_mangen). `crates/vvm-host/tests/cli.rs` fails when the checked-in
//! page is not current.

use std::path::Path;

use anyhow::{Context, bail};

/// Where the pages live, from the workspace root.
const DIR: &str = "crates/vvm-host/doc";
/// vvm-host's page, then one per subcommand.
const PAGES: [Option<&str>; 5] = [
    None,
    Some("run"),
    Some("status"),
    Some("handover"),
    Some("completions"),
];

pub(crate) fn run() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("xtask has no parent directory")?;
    std::fs::create_dir_all(root.join(DIR))?;
    for sub in PAGES {
        let mut command = crate::cargo::command();
        command
            .current_dir(root)
            .args(["run", "-q", "-p", "vvm-host", "--", "__vvm-host-man"])
            .args(sub);
        let output = command.output().context("cannot run vvm-host")?;
        if !output.status.success() {
            bail!(
                "vvm-host man failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let name = sub.map_or_else(|| "vvm-host.1".to_owned(), |s| format!("vvm-host-{s}.1"));
        let page = root.join(DIR).join(name);
        std::fs::write(&page, &output.stdout)?;
        println!("wrote {}", page.display());
    }
    Ok(())
}
