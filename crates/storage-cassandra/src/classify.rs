//! Mapping driver errors to [`ErrorKind`]s.
//!
//! The rule: a conditional write whose request may have reached a
//! coordinator and whose answer we did not get is
//! [`ErrorKind::OutcomeUnknown`]; an error that proves nothing was executed
//! and may go away is [`ErrorKind::Transient`]; an error that will not go away
//! without someone changing the schema, the grants or the configuration is
//! [`ErrorKind::Permanent`]. Reads change nothing, so they are never
//! outcome-unknown.

use scylla::errors::{
    ConnectionError, ConnectionPoolError, ConnectionSetupRequestErrorKind, DbError, ExecutionError,
    MetadataError, NewSessionError, PrepareError, RequestAttemptError,
};
use scylla::statement::Consistency;
use ttl_storage::ErrorKind;

/// What a request does (the driver kit's one type, with the lost-answer
/// rule: [`Op::lost_answer`]).
pub(crate) use ttl_storage::kit::Op;

/// Classifies an execution error of a request of kind `op`.
pub(crate) fn classify_execution(err: &ExecutionError, op: Op) -> ErrorKind {
    match err {
        // Rejected by the driver before sending.
        ExecutionError::BadQuery(_) => ErrorKind::Permanent,
        ExecutionError::EmptyPlan | ExecutionError::ConnectionPoolError(_) => ErrorKind::Transient,
        ExecutionError::PrepareError(e) => classify_prepare(e),
        ExecutionError::LastAttemptError(e) => classify_attempt(e, op),
        // The request was sent and no answer came back in time.
        ExecutionError::RequestTimeout(_) => op.lost_answer(),
        ExecutionError::UseKeyspaceError(_)
        | ExecutionError::SchemaAgreementError(_)
        | ExecutionError::MetadataError(_) => ErrorKind::Transient,
        // Unknown future variants: assume the worst for writes.
        _ => op.lost_answer(),
    }
}

/// Classifies an error of one attempt (the last one the driver made).
pub(crate) fn classify_attempt(err: &RequestAttemptError, op: Op) -> ErrorKind {
    match err {
        RequestAttemptError::SerializationError(_)
        | RequestAttemptError::CqlRequestSerialization(_) => ErrorKind::Permanent,
        RequestAttemptError::UnableToAllocStreamId
        | RequestAttemptError::RepreparedIdChanged { .. }
        | RequestAttemptError::RepreparedIdMissingInBatch => ErrorKind::Transient,
        RequestAttemptError::DbError(db, _) => classify_db(db, op),
        // Sent, then the connection broke or the answer was garbled.
        RequestAttemptError::BrokenConnectionError(_)
        | RequestAttemptError::BodyExtensionsParseError(_)
        | RequestAttemptError::CqlResultParseError(_)
        | RequestAttemptError::CqlErrorParseError(_)
        | RequestAttemptError::UnexpectedResponse(_)
        | RequestAttemptError::NonfinishedPagingState => op.lost_answer(),
        _ => op.lost_answer(),
    }
}

/// Classifies an error the database returned.
pub(crate) fn classify_db(err: &DbError, op: Op) -> ErrorKind {
    match err {
        DbError::SyntaxError
        | DbError::Invalid
        | DbError::AlreadyExists { .. }
        | DbError::FunctionFailure { .. }
        | DbError::AuthenticationError
        | DbError::Unauthorized
        | DbError::ConfigError
        | DbError::ProtocolError => ErrorKind::Permanent,
        // Refused before any replica was asked to accept anything.
        DbError::Unavailable { .. }
        | DbError::Overloaded
        | DbError::IsBootstrapping
        | DbError::RateLimitReached { .. }
        | DbError::Unprepared { .. }
        | DbError::TruncateError => ErrorKind::Transient,
        // A CAS read of the current value timed out or failed before any
        // proposal: nothing was applied.
        DbError::ReadTimeout { .. } | DbError::ReadFailure { .. } => ErrorKind::Transient,
        // WriteTimeout with WriteType::Cas is the Paxos round timing out (the
        // proposal may have been accepted by some replicas and be completed by
        // a later round); with WriteType::Simple it is the commit phase of an
        // accepted proposal. Either way: maybe applied.
        DbError::WriteTimeout { .. } | DbError::WriteFailure { .. } => op.lost_answer(),
        DbError::ServerError | DbError::Other(_) => op.lost_answer(),
        _ => op.lost_answer(),
    }
}

/// Classifies a failure to prepare a statement (nothing was executed).
pub(crate) fn classify_prepare(err: &PrepareError) -> ErrorKind {
    match err {
        PrepareError::AllAttemptsFailed { first_attempt } => {
            match classify_attempt(first_attempt, Op::Read) {
                ErrorKind::Permanent => ErrorKind::Permanent,
                _ => ErrorKind::Transient,
            }
        }
        PrepareError::ConnectionPoolError(_) | PrepareError::PreparedStatementIdsMismatch => {
            ErrorKind::Transient
        }
        _ => ErrorKind::Transient,
    }
}

/// Classifies a failure to open a session: bad credentials or a missing
/// authenticator are permanent, unreachable nodes transient.
pub(crate) fn classify_new_session(err: &NewSessionError) -> ErrorKind {
    match err {
        NewSessionError::EmptyKnownNodesList => ErrorKind::Permanent,
        NewSessionError::MetadataError(MetadataError::ConnectionPoolError(
            ConnectionPoolError::Broken {
                last_connection_error,
            },
        )) => classify_connection(last_connection_error),
        _ => ErrorKind::Transient,
    }
}

/// What a node said when it refused the login (bad credentials), or that
/// it asks for one the URL does not give: the words for the one line an
/// operator reads, in place of the driver's nested pool error.
pub(crate) fn login_refused(err: &NewSessionError) -> Option<String> {
    let NewSessionError::MetadataError(MetadataError::ConnectionPoolError(
        ConnectionPoolError::Broken {
            last_connection_error: ConnectionError::ConnectionSetupRequestError(setup),
        },
    )) = err
    else {
        return None;
    };
    match setup.get_error() {
        ConnectionSetupRequestErrorKind::DbError(DbError::AuthenticationError, message) => {
            Some(format!("the node refused the login: {message}"))
        }
        ConnectionSetupRequestErrorKind::MissingAuthentication => Some(
            "the node asks for a login and the URL gives none (scylla://USER:PASSWORD@host/...)"
                .to_owned(),
        ),
        _ => None,
    }
}

/// Classifies a failure to open a connection.
pub(crate) fn classify_connection(err: &ConnectionError) -> ErrorKind {
    match err {
        ConnectionError::ConnectionSetupRequestError(setup) => classify_setup(setup.get_error()),
        _ => ErrorKind::Transient,
    }
}

/// Classifies a failed request of the connection handshake (startup, auth).
fn classify_setup(err: &ConnectionSetupRequestErrorKind) -> ErrorKind {
    match err {
        ConnectionSetupRequestErrorKind::DbError(db, _) => classify_db(db, Op::Read),
        ConnectionSetupRequestErrorKind::StartAuthSessionError(_)
        | ConnectionSetupRequestErrorKind::AuthChallengeEvaluationError(_)
        | ConnectionSetupRequestErrorKind::AuthFinishError(_)
        | ConnectionSetupRequestErrorKind::MissingAuthentication => ErrorKind::Permanent,
        _ => ErrorKind::Transient,
    }
}

/// Whether a failed SERIAL read is worth retrying at once: the errors a
/// healthy cluster returns when Paxos rounds contend on a key (Paxos v2
/// abandons a read that meets a competing round, as a `WriteTimeout` of
/// write type `CAS` at consistency SERIAL) or while a replica is briefly
/// down or overloaded. A read changes nothing, so retrying is always safe;
/// the caller bounds it by the operation's deadline.
pub(crate) fn serial_read_retryable(err: &ExecutionError) -> bool {
    match err {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, _)) => matches!(
            db,
            DbError::WriteTimeout { .. }
                | DbError::ReadTimeout { .. }
                | DbError::Unavailable { .. }
                | DbError::Overloaded
                | DbError::IsBootstrapping
        ),
        ExecutionError::LastAttemptError(RequestAttemptError::UnableToAllocStreamId)
        | ExecutionError::ConnectionPoolError(_)
        | ExecutionError::EmptyPlan => true,
        _ => false,
    }
}

/// The CQL name of a consistency level (`LOCAL_SERIAL`, not `LocalSerial`).
fn cql_level(level: Consistency) -> &'static str {
    match level {
        Consistency::Any => "ANY",
        Consistency::One => "ONE",
        Consistency::Two => "TWO",
        Consistency::Three => "THREE",
        Consistency::Quorum => "QUORUM",
        Consistency::All => "ALL",
        Consistency::LocalQuorum => "LOCAL_QUORUM",
        Consistency::EachQuorum => "EACH_QUORUM",
        Consistency::LocalOne => "LOCAL_ONE",
        Consistency::Serial => "SERIAL",
        Consistency::LocalSerial => "LOCAL_SERIAL",
    }
}

/// A message for `what` failing with `err` that says, for the replica-count
/// errors, how many replicas were required and how many answered or were
/// alive (`unavailable: 1 of 2 required replicas alive at SERIAL`).
pub(crate) fn describe(what: &str, err: &ExecutionError) -> String {
    let ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, _)) = err else {
        return format!("{what} failed");
    };
    match db {
        DbError::Unavailable {
            consistency,
            required,
            alive,
        } => format!(
            "{what} failed: unavailable: {alive} of {required} required replicas alive at {}",
            cql_level(*consistency)
        ),
        DbError::WriteTimeout {
            consistency,
            received,
            required,
            write_type,
        } => format!(
            "{what} failed: write timeout ({write_type:?}): {received} of {required} required replicas answered at {}",
            cql_level(*consistency)
        ),
        DbError::ReadTimeout {
            consistency,
            received,
            required,
            ..
        } => format!(
            "{what} failed: read timeout: {received} of {required} required replicas answered at {}",
            cql_level(*consistency)
        ),
        _ => format!("{what} failed"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use scylla::errors::{BrokenConnectionErrorKind, WriteType};

    use super::*;

    fn db(err: DbError) -> ExecutionError {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(err, "msg".into()))
    }

    fn write_timeout(write_type: WriteType) -> DbError {
        DbError::WriteTimeout {
            consistency: Consistency::Serial,
            received: 0,
            required: 1,
            write_type,
        }
    }

    #[test]
    fn cas_write_timeout_is_outcome_unknown() {
        for wt in [WriteType::Cas, WriteType::Simple] {
            let err = db(write_timeout(wt));
            assert_eq!(
                classify_execution(&err, Op::Write),
                ErrorKind::OutcomeUnknown
            );
            assert_eq!(classify_execution(&err, Op::Read), ErrorKind::Transient);
        }
        let failure = db(DbError::WriteFailure {
            consistency: Consistency::Quorum,
            received: 1,
            required: 2,
            numfailures: 1,
            write_type: WriteType::Cas,
        });
        assert_eq!(
            classify_execution(&failure, Op::Write),
            ErrorKind::OutcomeUnknown
        );
    }

    #[test]
    fn client_timeout_and_broken_connection_after_sending_are_outcome_unknown() {
        let timeout = ExecutionError::RequestTimeout(Duration::from_secs(1));
        assert_eq!(
            classify_execution(&timeout, Op::Write),
            ErrorKind::OutcomeUnknown
        );
        assert_eq!(classify_execution(&timeout, Op::Read), ErrorKind::Transient);
        let broken = ExecutionError::LastAttemptError(RequestAttemptError::BrokenConnectionError(
            BrokenConnectionErrorKind::ChannelError.into(),
        ));
        assert_eq!(
            classify_execution(&broken, Op::Write),
            ErrorKind::OutcomeUnknown
        );
        assert_eq!(classify_execution(&broken, Op::Read), ErrorKind::Transient);
    }

    #[test]
    fn refusals_before_execution_are_transient() {
        let unavailable = db(DbError::Unavailable {
            consistency: Consistency::Serial,
            required: 2,
            alive: 1,
        });
        for err in [
            unavailable,
            db(DbError::Overloaded),
            db(DbError::IsBootstrapping),
            db(DbError::ReadTimeout {
                consistency: Consistency::Serial,
                received: 0,
                required: 1,
                data_present: false,
            }),
            ExecutionError::EmptyPlan,
            ExecutionError::ConnectionPoolError(ConnectionPoolError::Initializing),
            ExecutionError::LastAttemptError(RequestAttemptError::UnableToAllocStreamId),
        ] {
            assert_eq!(
                classify_execution(&err, Op::Write),
                ErrorKind::Transient,
                "{err}"
            );
            assert_eq!(classify_execution(&err, Op::Read), ErrorKind::Transient);
        }
    }

    #[test]
    fn schema_auth_and_syntax_errors_are_permanent() {
        for err in [
            DbError::SyntaxError,
            DbError::Invalid,
            DbError::Unauthorized,
            DbError::AuthenticationError,
            DbError::ConfigError,
        ] {
            let err = db(err);
            assert_eq!(
                classify_execution(&err, Op::Write),
                ErrorKind::Permanent,
                "{err}"
            );
            assert_eq!(classify_execution(&err, Op::Read), ErrorKind::Permanent);
        }
        let prepare = PrepareError::AllAttemptsFailed {
            first_attempt: RequestAttemptError::DbError(DbError::Invalid, "no such table".into()),
        };
        assert_eq!(classify_prepare(&prepare), ErrorKind::Permanent);
        let prepare = PrepareError::AllAttemptsFailed {
            first_attempt: RequestAttemptError::DbError(
                write_timeout(WriteType::Simple),
                "x".into(),
            ),
        };
        assert_eq!(classify_prepare(&prepare), ErrorKind::Transient);
    }

    #[test]
    fn session_errors() {
        assert_eq!(
            classify_new_session(&NewSessionError::EmptyKnownNodesList),
            ErrorKind::Permanent
        );
        assert_eq!(
            classify_new_session(&NewSessionError::FailedToResolveAnyHostname(vec![
                "nowhere".into()
            ])),
            ErrorKind::Transient
        );
        let broken = |last_connection_error| {
            NewSessionError::MetadataError(MetadataError::ConnectionPoolError(
                ConnectionPoolError::Broken {
                    last_connection_error,
                },
            ))
        };
        assert_eq!(
            classify_new_session(&broken(ConnectionError::ConnectTimeout)),
            ErrorKind::Transient
        );
        let bad_password = ConnectionSetupRequestErrorKind::DbError(
            DbError::AuthenticationError,
            "bad credentials".into(),
        );
        assert_eq!(classify_setup(&bad_password), ErrorKind::Permanent);
        assert_eq!(
            classify_setup(&ConnectionSetupRequestErrorKind::MissingAuthentication),
            ErrorKind::Permanent
        );
        assert_eq!(
            classify_setup(&ConnectionSetupRequestErrorKind::UnableToAllocStreamId),
            ErrorKind::Transient
        );
    }

    #[test]
    fn contention_errors_of_serial_reads_are_retried() {
        let contended = db(DbError::WriteTimeout {
            consistency: Consistency::Serial,
            received: 0,
            required: 2,
            write_type: WriteType::Cas,
        });
        assert!(serial_read_retryable(&contended));
        assert!(serial_read_retryable(&db(DbError::ReadTimeout {
            consistency: Consistency::Serial,
            received: 1,
            required: 2,
            data_present: false,
        })));
        assert!(serial_read_retryable(&db(DbError::Unavailable {
            consistency: Consistency::Serial,
            required: 2,
            alive: 1,
        })));
        assert!(serial_read_retryable(&db(DbError::Overloaded)));
        assert!(serial_read_retryable(&ExecutionError::EmptyPlan));
        // The client's own deadline is spent, and permanent errors stay.
        assert!(!serial_read_retryable(&ExecutionError::RequestTimeout(
            Duration::from_secs(1)
        )));
        assert!(!serial_read_retryable(&db(DbError::Invalid)));
        assert!(!serial_read_retryable(&db(DbError::Unauthorized)));
    }

    #[test]
    fn replica_counts_are_named() {
        let unavailable = db(DbError::Unavailable {
            consistency: Consistency::Serial,
            required: 2,
            alive: 1,
        });
        assert_eq!(
            describe("get", &unavailable),
            "get failed: unavailable: 1 of 2 required replicas alive at SERIAL"
        );
        let timeout = db(DbError::WriteTimeout {
            consistency: Consistency::Serial,
            received: 0,
            required: 2,
            write_type: WriteType::Cas,
        });
        let message = describe("insert_if_not_exists", &timeout);
        assert!(
            message.contains("0 of 2 required replicas answered at SERIAL"),
            "{message}"
        );
        assert_eq!(describe("get", &ExecutionError::EmptyPlan), "get failed");
    }
}
