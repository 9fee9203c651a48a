//! The `dynamodb://` URL form of a [`DynamoConfig`], parsed with `url`.

use std::{str::FromStr, time::Duration};

use url::Url;

use crate::{ConfigError, DynamoConfig, ExpiryMode};

impl DynamoConfig {
    /// Parses `dynamodb://TABLE?region=R&endpoint=URL&create_table=BOOL&connect_timeout_ms=N&request_timeout_ms=N&max_attempts=N&expiry=wall_clock|observed_lease`.
    ///
    /// Every parameter is optional. Credentials cannot be given in the URL
    /// (URLs end up in logs); they come from the AWS chain or the builder.
    pub fn from_url(text: &str) -> Result<Self, ConfigError> {
        let url = Url::parse(text).map_err(|e| ConfigError::NotAUrl(e.to_string()))?;
        if url.scheme() != "dynamodb" {
            return Err(ConfigError::WrongScheme(url.scheme().to_string()));
        }
        let table = url.host_str().unwrap_or_default();
        let mut builder = DynamoConfig::builder(table);
        let mut seen: Vec<String> = Vec::new();
        for (name, value) in url.query_pairs() {
            if seen.iter().any(|s| *s == name) {
                return Err(ConfigError::DuplicateParameter(name.into_owned()));
            }
            seen.push(name.to_string());
            let value = value.into_owned();
            builder = match &*name {
                "region" => builder.region(value),
                "endpoint" => builder.endpoint(value),
                "create_table" => builder.create_table(parse_bool(&name, &value)?),
                "connect_timeout_ms" => {
                    builder.connect_timeout(Duration::from_millis(parse_u64(&name, &value)?))
                }
                "request_timeout_ms" => {
                    builder.request_timeout(Duration::from_millis(parse_u64(&name, &value)?))
                }
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
                other => return Err(ConfigError::UnknownParameter(other.to_string())),
            };
        }
        builder.build()
    }
}

impl FromStr for DynamoConfig {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DynamoConfig::from_url(s)
    }
}

fn parse_bool(name: &str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(ConfigError::InvalidParameter {
            name: name.to_string(),
            value: value.to_string(),
            expected: "true or false",
        }),
    }
}

fn parse_u64(name: &str, value: &str) -> Result<u64, ConfigError> {
    value.parse().map_err(|_| ConfigError::InvalidParameter {
        name: name.to_string(),
        value: value.to_string(),
        expected: "a non-negative integer",
    })
}
