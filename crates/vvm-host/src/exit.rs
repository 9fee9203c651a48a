//! The exit statuses of `vvm-host`.
//!
//! The command's own status passes through unchanged (0–255, 128+N after
//! signal N, 126/127 when it cannot be started), so vvm-host's own outcomes
//! use codes a command rarely uses, in the style of GNU `timeout` (124/125):
//! 123 leadership lost, 124 no leadership acquired, 125 vvm-host's own
//! error. Each can be moved with a flag (like `flock -E`), e.g. to a code
//! the command is known never to use.

/// Bad options (as clap reports them); the command has not run.
pub(crate) const USAGE: u8 = 2;
/// Default: leadership was lost (also after the killer ended the command).
pub(crate) const DEFAULT_LOST: u8 = 123;
/// Default: no leadership acquired within `--acquisition-duration`.
pub(crate) const DEFAULT_NO_LEADERSHIP: u8 = 124;
/// Default: an error of vvm-host itself (storage, runtime, guard).
pub(crate) const DEFAULT_ERROR: u8 = 125;

/// vvm-host's own exit statuses, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExitCodes {
    pub(crate) lost: u8,
    pub(crate) no_leadership: u8,
    pub(crate) error: u8,
}

impl Default for ExitCodes {
    fn default() -> Self {
        ExitCodes {
            lost: DEFAULT_LOST,
            no_leadership: DEFAULT_NO_LEADERSHIP,
            error: DEFAULT_ERROR,
        }
    }
}

impl ExitCodes {
    /// Refuses codes that could not be told apart: 0, the usage code, and
    /// two outcomes sharing a code.
    pub(crate) fn validate(self) -> Result<Self, String> {
        let named = [
            ("--exit-code-lost", self.lost),
            ("--exit-code-no-leadership", self.no_leadership),
            ("--exit-code-error", self.error),
        ];
        for (flag, code) in named {
            if code == 0 || code == USAGE {
                return Err(format!("{flag} {code}: 0 and {USAGE} are reserved"));
            }
        }
        for (i, (flag_a, a)) in named.iter().enumerate() {
            for (flag_b, b) in &named[i + 1..] {
                if a == b {
                    return Err(format!("{flag_a} and {flag_b} are both {a}"));
                }
            }
        }
        Ok(self)
    }

    /// The outcome a command's exit `code` would be mistaken for, if any.
    pub(crate) fn collides_with(self, code: u8) -> Option<&'static str> {
        if code == self.lost {
            Some("leadership lost")
        } else if code == self.no_leadership {
            Some("no leadership acquired")
        } else if code == self.error {
            Some("vvm-host error")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_distinct_and_valid() {
        assert_eq!(ExitCodes::default().validate(), Ok(ExitCodes::default()));
        assert_eq!(
            ExitCodes::default().collides_with(123),
            Some("leadership lost")
        );
        assert_eq!(ExitCodes::default().collides_with(4), None);
    }

    #[test]
    fn ambiguous_codes_are_refused() {
        let same = ExitCodes {
            lost: 9,
            no_leadership: 9,
            error: 125,
        };
        assert!(same.validate().is_err());
        let zero = ExitCodes {
            lost: 0,
            ..ExitCodes::default()
        };
        assert!(zero.validate().is_err());
        let usage = ExitCodes {
            error: 2,
            ..ExitCodes::default()
        };
        assert!(usage.validate().is_err());
    }
}
