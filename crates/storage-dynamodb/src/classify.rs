//! Mapping of AWS SDK errors onto the storage contract's error kinds.

use std::error::Error as StdError;

use aws_sdk_dynamodb::{
    error::{ProvideErrorMetadata, SdkError},
    operation::{
        create_table::CreateTableError, delete_item::DeleteItemError,
        describe_table::DescribeTableError, describe_time_to_live::DescribeTimeToLiveError,
        get_item::GetItemError, put_item::PutItemError, update_time_to_live::UpdateTimeToLiveError,
    },
};
use ttl_storage::{ErrorKind, StorageError};

/// What a failed request means for the caller.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The condition of a conditional write did not hold: the answer is `false`.
    ConditionFailed,
    /// A real error of this kind.
    Error(ErrorKind),
}

/// What a request does (the driver kit's one type, with the lost-answer
/// rule: [`Op::lost_answer`]).
pub(crate) use ttl_storage::kit::Op;

/// Error codes that mean "slow down": the request was rejected, not applied.
const THROTTLING: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "ThrottlingException",
    "Throttling",
    "LimitExceededException",
    "TransactionConflictException",
    "TransactionInProgressException",
];

/// An operation error that may be a failed condition.
pub(crate) trait OperationError:
    ProvideErrorMetadata + StdError + Send + Sync + 'static
{
    /// True for the typed `ConditionalCheckFailedException` variant.
    fn is_condition_failed(&self) -> bool {
        false
    }
}

impl OperationError for PutItemError {
    fn is_condition_failed(&self) -> bool {
        self.is_conditional_check_failed_exception()
    }
}

impl OperationError for DeleteItemError {
    fn is_condition_failed(&self) -> bool {
        self.is_conditional_check_failed_exception()
    }
}

impl OperationError for GetItemError {}
impl OperationError for DescribeTableError {}
impl OperationError for CreateTableError {}
impl OperationError for DescribeTimeToLiveError {}
impl OperationError for UpdateTimeToLiveError {}

/// Classifies an SDK error.
pub(crate) fn classify<E: OperationError>(err: &SdkError<E>, op: Op) -> Failure {
    let after_sending = op.lost_answer();
    match err {
        // The request could not be built: a bug or bad input, never sent.
        SdkError::ConstructionFailure(_) => Failure::Error(ErrorKind::Permanent),
        // The operation timed out; we cannot tell whether the request left.
        SdkError::TimeoutError(_) => Failure::Error(after_sending),
        SdkError::DispatchFailure(failure) => {
            if failure.is_user() {
                Failure::Error(ErrorKind::Permanent)
            } else if never_connected(err) {
                Failure::Error(ErrorKind::Transient)
            } else {
                // Timeout or I/O on a connection that may have carried the request.
                Failure::Error(after_sending)
            }
        }
        // A response arrived but could not be read: the request was processed.
        SdkError::ResponseError(_) => Failure::Error(after_sending),
        SdkError::ServiceError(service) if service.err().is_condition_failed() => {
            Failure::ConditionFailed
        }
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            classify_service(service.err().code(), status, op)
        }
        // `SdkError` is non-exhaustive.
        _ => Failure::Error(after_sending),
    }
}

/// Classifies an error response by its code and HTTP status.
pub(crate) fn classify_service(code: Option<&str>, status: u16, op: Op) -> Failure {
    let code = code.unwrap_or_default();
    if code == "ConditionalCheckFailedException" {
        return Failure::ConditionFailed;
    }
    if THROTTLING.contains(&code) || status == 429 {
        return Failure::Error(ErrorKind::Transient);
    }
    let server_error = (500..=599).contains(&status) || code == "InternalServerError";
    match (code, status) {
        // 503 ServiceUnavailable: rejected without being processed.
        ("ServiceUnavailable", _) | (_, 503) => Failure::Error(ErrorKind::Transient),
        // DynamoDB documents 500 as "the request may or may not have
        // succeeded", and a 502/504 from anything in between proves nothing
        // either: for a conditional write that is an unknown outcome.
        _ if server_error && op == Op::Write => Failure::Error(ErrorKind::OutcomeUnknown),
        // For a read, any server error is worth a retry.
        _ if server_error => Failure::Error(ErrorKind::Transient),
        // Validation, auth, missing table, item too large, ...: retrying will not help.
        _ => Failure::Error(ErrorKind::Permanent),
    }
}

/// True if the error chain shows the connection was never established, so
/// nothing was sent (connection refused, DNS failure, connect timeout).
fn never_connected(err: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(client) = e.downcast_ref::<hyper_util::client::legacy::Error>()
            && client.is_connect()
        {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable
            )
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// Turns an SDK error into `Ok(false)` (condition failed) or a [`StorageError`].
pub(crate) fn to_storage<E: OperationError>(
    err: SdkError<E>,
    op: Op,
    what: &str,
) -> Result<bool, StorageError> {
    match classify(&err, op) {
        Failure::ConditionFailed => Ok(false),
        Failure::Error(kind) => {
            // The service's own words with its code (an unknown access key
            // is `UnrecognizedClientException: The Access Key ID or
            // security token is invalid.`), said once.
            let detail = match (err.code(), err.message()) {
                (Some(code), Some(message)) if !message.is_empty() => {
                    format!("{what}: {code}: {message}")
                }
                (Some(code), _) => format!("{what}: {code}"),
                (None, _) => format!("{what}: {err}"),
            };
            Err(StorageError::with_source(kind, detail, err))
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::{
        config::http::HttpResponse,
        error::{ConnectorError, ErrorMetadata},
        types::error::ConditionalCheckFailedException,
    };

    use aws_smithy_types::body::SdkBody;

    use super::*;

    fn response(status: u16) -> HttpResponse {
        HttpResponse::new(status.try_into().unwrap(), SdkBody::empty())
    }

    fn service(code: &str, status: u16) -> SdkError<PutItemError> {
        let meta = ErrorMetadata::builder().code(code).message("m").build();
        SdkError::service_error(PutItemError::generic(meta), response(status))
    }

    fn kind(err: &SdkError<PutItemError>, op: Op) -> Failure {
        classify(err, op)
    }

    #[test]
    fn condition_failed_is_false() {
        let err = SdkError::service_error(
            PutItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .message("The conditional request failed")
                    .build(),
            ),
            response(400),
        );
        assert_eq!(kind(&err, Op::Write), Failure::ConditionFailed);
        assert_eq!(to_storage(err, Op::Write, "put").ok(), Some(false));
    }

    #[test]
    fn throttling_and_5xx_are_transient() {
        for (code, status) in [
            ("ProvisionedThroughputExceededException", 400),
            ("ThrottlingException", 400),
            ("RequestLimitExceeded", 400),
            ("TransactionConflictException", 400),
            ("Whatever", 429),
            ("ServiceUnavailable", 503),
            ("Whatever", 503),
        ] {
            assert_eq!(
                kind(&service(code, status), Op::Write),
                Failure::Error(ErrorKind::Transient),
                "{code} {status}"
            );
        }
    }

    #[test]
    fn other_server_errors_on_a_conditional_write_are_unknown() {
        for (code, status) in [
            ("InternalServerError", 500),
            ("Whatever", 500),
            ("Whatever", 502),
            ("Whatever", 504),
        ] {
            let err = service(code, status);
            assert_eq!(
                kind(&err, Op::Write),
                Failure::Error(ErrorKind::OutcomeUnknown),
                "{code} {status}"
            );
            assert_eq!(
                kind(&err, Op::Read),
                Failure::Error(ErrorKind::Transient),
                "{code} {status}"
            );
        }
    }

    #[test]
    fn validation_auth_and_missing_table_are_permanent() {
        for code in [
            "ValidationException",
            "ResourceNotFoundException",
            "AccessDeniedException",
            "UnrecognizedClientException",
            "MissingAuthenticationTokenException",
        ] {
            assert_eq!(
                kind(&service(code, 400), Op::Write),
                Failure::Error(ErrorKind::Permanent),
                "{code}"
            );
        }
    }

    #[test]
    fn timeouts_after_sending_are_unknown_for_writes_only() {
        let timeout: SdkError<PutItemError> = SdkError::timeout_error("operation timed out");
        assert_eq!(
            kind(&timeout, Op::Write),
            Failure::Error(ErrorKind::OutcomeUnknown)
        );
        assert_eq!(
            kind(&timeout, Op::Read),
            Failure::Error(ErrorKind::Transient)
        );

        let reset: SdkError<PutItemError> = SdkError::dispatch_failure(ConnectorError::io(
            std::io::Error::from(std::io::ErrorKind::ConnectionReset).into(),
        ));
        assert_eq!(
            kind(&reset, Op::Write),
            Failure::Error(ErrorKind::OutcomeUnknown)
        );
        let unreadable: SdkError<PutItemError> =
            SdkError::response_error("bad body", response(200));
        assert_eq!(
            kind(&unreadable, Op::Write),
            Failure::Error(ErrorKind::OutcomeUnknown)
        );
    }

    #[test]
    fn failures_before_sending_are_transient_or_permanent() {
        let refused: SdkError<PutItemError> = SdkError::dispatch_failure(ConnectorError::io(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
        ));
        assert_eq!(
            kind(&refused, Op::Write),
            Failure::Error(ErrorKind::Transient)
        );
        let user: SdkError<PutItemError> =
            SdkError::dispatch_failure(ConnectorError::user("bad request".into()));
        assert_eq!(kind(&user, Op::Write), Failure::Error(ErrorKind::Permanent));
        let build: SdkError<PutItemError> = SdkError::construction_failure("missing field");
        assert_eq!(
            kind(&build, Op::Write),
            Failure::Error(ErrorKind::Permanent)
        );
    }

    #[test]
    fn storage_error_keeps_code_and_source() {
        let err = to_storage(
            service("ResourceNotFoundException", 400),
            Op::Read,
            "get_item",
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Permanent);
        assert!(
            err.to_string()
                .contains("get_item: ResourceNotFoundException")
        );
        assert!(StdError::source(&err).is_some());
    }
}
