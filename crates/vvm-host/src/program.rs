//! Finding the command's program before anything runs, as a shell would:
//! a name without `/` is looked up on `PATH`; a path must be an executable
//! file. Not found is exit status 127, not executable 126.

use std::{ffi::OsStr, path::PathBuf};

/// Why the program cannot be run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProgramError {
    /// No such file, or no such name on `PATH`.
    #[error("{0}: command not found")]
    NotFound(String),
    /// It exists but is a directory or lacks execute permission.
    #[error("{0}: Permission denied")]
    NotExecutable(String),
}

impl ProgramError {
    /// The word the guard reports it with.
    pub(crate) fn kind_word(&self) -> &'static str {
        match self {
            ProgramError::NotFound(_) => "not-found",
            ProgramError::NotExecutable(_) => "not-executable",
        }
    }

    /// The exit status a shell gives it.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            ProgramError::NotFound(_) => 127,
            ProgramError::NotExecutable(_) => 126,
        }
    }
}

/// The program's path, checked.
pub(crate) fn resolve(program: &OsStr) -> Result<PathBuf, ProgramError> {
    let shown = program.to_string_lossy().into_owned();
    if program.as_encoded_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        let Ok(meta) = std::fs::metadata(&path) else {
            return Err(ProgramError::NotFound(shown));
        };
        let no_x_bit = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 == 0;
        if meta.is_dir()
            || no_x_bit
            || nix::unistd::access(&path, nix::unistd::AccessFlags::X_OK).is_err()
        {
            return Err(ProgramError::NotExecutable(shown));
        }
        return Ok(path);
    }
    which::which(program).map_err(|_| {
        // bash: a name found on PATH only as a file that cannot be run is
        // "Permission denied" (126), not "command not found" (127)
        let on_path = std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| dir.join(program).is_file())
        });
        if on_path {
            ProgramError::NotExecutable(shown)
        } else {
            ProgramError::NotFound(shown)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_programs_like_a_shell() {
        assert!(resolve(OsStr::new("sh")).is_ok());
        assert!(matches!(
            resolve(OsStr::new("no-such-program-vvm")),
            Err(ProgramError::NotFound(_))
        ));
        assert!(matches!(
            resolve(OsStr::new("/no/such/file")),
            Err(ProgramError::NotFound(_))
        ));
        let file = tempfile::NamedTempFile::new().unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            resolve(file.path().as_os_str()),
            Err(ProgramError::NotExecutable(_))
        ));
        assert!(matches!(
            resolve(OsStr::new("/tmp/")),
            Err(ProgramError::NotExecutable(_))
        ));
    }
}
