//! The `dynamodb://` URL form of a [`DynamoDbConfig`], parsed with `url`.

use std::{str::FromStr, time::Duration};

use ttl_storage::kit::{UrlError, url::Once};

use crate::{ConfigError, DynamoDbConfig, ExpiryMode};

impl DynamoDbConfig {
    /// Parses a URL:
    ///
    /// ```text
    /// dynamodb://TABLE[?param=value&...]
    /// ```
    ///
    /// Every parameter is optional (unknown ones are errors). Credentials
    /// cannot be given in the URL (URLs end up in logs); they come from the
    /// AWS chain or the builder.
    ///
    /// | parameter | meaning | default |
    /// |---|---|---|
    /// | `region` | AWS region | the AWS chain's |
    /// | `endpoint` | `http(s)://host[:port]` (DynamoDB Local, a proxy) | AWS's |
    /// | `create_table` | create the table when missing (`true` / `false`) | `false` |
    /// | `timeout` | timeout of one request (`500ms`, `2s`, `1m 30s`, ...); `request_timeout` is the same | `3s` |
    /// | `connect_timeout` | TCP/TLS connect timeout (a duration, like `timeout`) | `2s` |
    /// | `request_timeout_ms` | older form of `timeout`: a number of milliseconds | |
    /// | `connect_timeout_ms` | older form of `connect_timeout`: a number of milliseconds | |
    /// | `max_attempts` | attempts of one operation, 1 to 10 | `3` |
    /// | `expiry` | `wall_clock` or `observed_lease` | `wall_clock` |
    ///
    /// The names of one timeout are one parameter: giving two is an error.
    ///
    /// ```
    /// use std::time::Duration;
    /// use storage_dynamodb::DynamoDbConfig;
    ///
    /// let config = DynamoDbConfig::from_url(
    ///     "dynamodb://leases?region=eu-west-1&timeout=2s&connect_timeout=500ms",
    /// )
    /// .unwrap();
    /// assert_eq!(config.table(), "leases");
    /// assert_eq!(config.request_timeout(), Duration::from_secs(2));
    /// assert_eq!(config.connect_timeout(), Duration::from_millis(500));
    /// // The older integer forms still work:
    /// let config = DynamoDbConfig::from_url("dynamodb://leases?request_timeout_ms=1500").unwrap();
    /// assert_eq!(config.request_timeout(), Duration::from_millis(1500));
    /// ```
    pub fn from_url(text: &str) -> Result<Self, ConfigError> {
        let url = ttl_storage::kit::url::parse(text)?;
        if url.scheme() != "dynamodb" {
            return Err(ConfigError::Url(UrlError::BadScheme {
                scheme: url.scheme().to_string(),
                expected: "dynamodb://",
            }));
        }
        let table = url.host_str().unwrap_or_default();
        let mut builder = DynamoDbConfig::builder(table);
        // The names of one timeout are one parameter.
        let mut once = Once::new(
            &[],
            &[
                ("request_timeout", "timeout"),
                ("request_timeout_ms", "timeout"),
                ("connect_timeout_ms", "connect_timeout"),
            ],
        );
        for (name, value) in url.query_pairs() {
            once.check(&name)?;
            let value = value.into_owned();
            builder = match &*name {
                "region" => builder.region(value),
                "endpoint" => builder.endpoint(value),
                "create_table" => builder.create_table(parse_bool(&name, &value)?),
                "timeout" | "request_timeout" => {
                    builder.request_timeout(parse_duration(&name, &value)?)
                }
                "connect_timeout" => builder.connect_timeout(parse_duration(&name, &value)?),
                "request_timeout_ms" => builder.request_timeout(parse_millis(&name, &value)?),
                "connect_timeout_ms" => builder.connect_timeout(parse_millis(&name, &value)?),
                "expiry" => builder.expiry_mode(match value.as_str() {
                    "wall_clock" => ExpiryMode::WallClock,
                    "observed_lease" => ExpiryMode::ObservedLease,
                    _ => {
                        return Err(ConfigError::InvalidParameter {
                            name: name.into_owned(),
                            value,
                            expected: "wall_clock or observed_lease",
                        });
                    }
                }),
                "max_attempts" => {
                    let n = parse_u64(&name, &value)?;
                    builder.max_attempts(u32::try_from(n).unwrap_or(u32::MAX))
                }
                other => return Err(UrlError::UnknownParameter(other.to_string()).into()),
            };
        }
        builder.build()
    }
}

impl FromStr for DynamoDbConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DynamoDbConfig::from_url(s)
    }
}

fn parse_bool(name: &str, value: &str) -> Result<bool, ConfigError> {
    ttl_storage::kit::query::parse_bool(value).ok_or_else(|| ConfigError::InvalidParameter {
        name: name.to_string(),
        value: value.to_string(),
        expected: "true or false",
    })
}

/// A humantime duration (`750ms`, `2s`, `1m 30s`); its range is checked
/// by the builder.
fn parse_duration(name: &str, value: &str) -> Result<Duration, ConfigError> {
    ttl_storage::kit::query::parse_duration(value).ok_or_else(|| ConfigError::InvalidParameter {
        name: name.to_string(),
        value: value.to_string(),
        expected: "a duration like 500ms or 2s",
    })
}

/// A whole number of milliseconds (the older `_ms` parameters).
fn parse_millis(name: &str, value: &str) -> Result<Duration, ConfigError> {
    ttl_storage::kit::query::parse_millis(value).ok_or_else(|| ConfigError::InvalidParameter {
        name: name.to_string(),
        value: value.to_string(),
        expected: "a whole number of milliseconds",
    })
}

fn parse_u64(name: &str, value: &str) -> Result<u64, ConfigError> {
    value.parse().map_err(|_| ConfigError::InvalidParameter {
        name: name.to_string(),
        value: value.to_string(),
        expected: "a non-negative integer",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeouts(url: &str) -> Result<(Duration, Duration), ConfigError> {
        DynamoDbConfig::from_url(url).map(|c| (c.request_timeout(), c.connect_timeout()))
    }

    #[test]
    fn timeouts_take_durations_and_the_older_milliseconds() {
        let ms = Duration::from_millis;
        assert_eq!(
            timeouts("dynamodb://leases?timeout=1s%20500ms&connect_timeout=250ms"),
            Ok((ms(1500), ms(250)))
        );
        assert_eq!(
            timeouts("dynamodb://leases?request_timeout=2s"),
            Ok((ms(2000), crate::DEFAULT_CONNECT_TIMEOUT))
        );
        assert_eq!(
            timeouts("dynamodb://leases?request_timeout_ms=1500&connect_timeout_ms=700"),
            Ok((ms(1500), ms(700)))
        );
    }

    #[test]
    fn bad_timeouts_have_typed_errors() {
        let invalid = |name: &str, value: &str, expected| ConfigError::InvalidParameter {
            name: name.into(),
            value: value.into(),
            expected,
        };
        let duration = "a duration like 500ms or 2s";
        let millis = "a whole number of milliseconds";
        let cases: &[(&str, ConfigError)] = &[
            ("timeout=5", invalid("timeout", "5", duration)),
            (
                "connect_timeout=soon",
                invalid("connect_timeout", "soon", duration),
            ),
            (
                "request_timeout=-1s",
                invalid("request_timeout", "-1s", duration),
            ),
            (
                "request_timeout_ms=2s",
                invalid("request_timeout_ms", "2s", millis),
            ),
            (
                "connect_timeout_ms=-1",
                invalid("connect_timeout_ms", "-1", millis),
            ),
            (
                "timeout=0s",
                ConfigError::InvalidTimeout {
                    name: "request_timeout",
                    value: Duration::ZERO,
                },
            ),
            (
                "connect_timeout=11m",
                ConfigError::InvalidTimeout {
                    name: "connect_timeout",
                    value: Duration::from_secs(660),
                },
            ),
            (
                "timeout=1s&request_timeout_ms=1000",
                ConfigError::Url(UrlError::DuplicateParameter("request_timeout_ms".into())),
            ),
            (
                "request_timeout=1s&timeout=1s",
                ConfigError::Url(UrlError::DuplicateParameter("timeout".into())),
            ),
            (
                "connect_timeout_ms=1&connect_timeout=1s",
                ConfigError::Url(UrlError::DuplicateParameter("connect_timeout".into())),
            ),
        ];
        for (query, expected) in cases {
            let url = format!("dynamodb://leases?{query}");
            assert_eq!(
                DynamoDbConfig::from_url(&url).as_ref(),
                Err(expected),
                "{url}"
            );
        }
        let err = DynamoDbConfig::from_url("dynamodb://leases?timeout=5").unwrap_err();
        assert!(err.to_string().contains("500ms or 2s"), "{err}");
    }
}
