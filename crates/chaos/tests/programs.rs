//! The harness's programs start and describe themselves. (This test also
//! makes `cargo test --workspace` build them, so `cargo xtask chaos` runs the
//! workspace's own build instead of compiling the harness again.)

use std::process::Command;

fn help_of(program: &str, path: &str) -> String {
    let output = Command::new(path)
        .arg("--help")
        .output()
        .unwrap_or_else(|err| panic!("{program}: could not start {path}: {err}"));
    assert!(
        output.status.success(),
        "{program} --help exited {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn every_program_of_the_harness_prints_its_usage() {
    let programs = [
        ("chaos", env!("CARGO_BIN_EXE_chaos")),
        ("chaos-contender", env!("CARGO_BIN_EXE_chaos-contender")),
        ("chaos-fleet", env!("CARGO_BIN_EXE_chaos-fleet")),
        ("chaos-pod", env!("CARGO_BIN_EXE_chaos-pod")),
        ("chaos-coordinator", env!("CARGO_BIN_EXE_chaos-coordinator")),
    ];
    for (program, path) in programs {
        let help = help_of(program, path);
        assert!(
            help.contains("Usage:") && help.contains(program),
            "{program} --help printed no usage line naming it:\n{help}"
        );
    }
}
