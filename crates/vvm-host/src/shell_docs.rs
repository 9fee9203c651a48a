//! What vvm-host prints for the shell and `man`, from the same clap
//! definition as `--help`: completion scripts (`vvm-host completions
//! SHELL`) and man pages (`vvm-host __vvm-host-man [SUBCOMMAND]`, an
//! internal entry point `cargo xtask man` runs, so it is never offered as
//! a subcommand).

use std::process::ExitCode;

use clap::CommandFactory;

use crate::{cli::Cli, exit};

/// The internal first argument that prints a man page.
pub(crate) const MAN_ARG: &str = "__vvm-host-man";

/// The completion script for `shell`.
///
/// clap_complete's bash script names the function of each subcommand of a
/// hyphenated binary in two ways (`vvm__host__subcmd__run` where it sets
/// the state, `vvm__subcmd__host__subcmd__run` where it matches it: clap
/// issue 6421), so nothing completes past the subcommand; the second
/// spelling is rewritten to the first.
pub(crate) fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "vvm-host", &mut script);
    if shell != clap_complete::Shell::Bash {
        return script;
    }
    String::from_utf8_lossy(&script)
        .replace("vvm__subcmd__host__", "vvm__host__")
        .into_bytes()
}

/// Prints the man page of vvm-host, or of the subcommand named in `args`.
pub(crate) fn man_main(args: &[std::ffi::OsString]) -> ExitCode {
    let mut command = Cli::command();
    command.build();
    let name = args.first().map(|a| a.to_string_lossy().into_owned());
    let command = match &name {
        None => command,
        Some(name) => match command.find_subcommand(name) {
            Some(sub) if name == "run" => sub
                .clone()
                .display_name("vvm-host-run")
                .after_help(crate::cli::man_after_help()),
            Some(sub) => sub.clone().display_name(format!("vvm-host-{name}")),
            None => {
                eprintln!("vvm-host: no subcommand {name:?}");
                return ExitCode::from(exit::USAGE);
            }
        },
    };
    let mut page = Vec::new();
    let rendered = clap_mangen::Man::new(command).render(&mut page);
    match rendered.and_then(|()| std::io::Write::write_all(&mut std::io::stdout(), &page)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("vvm-host: {err}");
            ExitCode::from(exit::DEFAULT_ERROR)
        }
    }
}
