//! The `mem` URL form, for the storage registry (`storage-url`).

use url::Url;

use crate::{ConfigError, MemConfig};

impl MemConfig {
    /// Parses `mem`, `mem://` or `mem://?max_records=N` (unknown or repeated
    /// options are errors).
    ///
    /// ```
    /// use storage_mem::MemConfig;
    ///
    /// assert_eq!(MemConfig::from_url("mem")?, MemConfig::new());
    /// let config = MemConfig::from_url("mem://?max_records=500")?;
    /// assert_eq!(config.max_records(), Some(500));
    /// assert!(MemConfig::from_url("mem://host").is_err());
    /// # Ok::<(), storage_mem::ConfigError>(())
    /// ```
    pub fn from_url(raw: &str) -> Result<MemConfig, ConfigError> {
        if raw == "mem" {
            return Ok(MemConfig::new());
        }
        let url = Url::parse(raw).map_err(|_| ConfigError::NotMem(raw.to_owned()))?;
        if url.scheme() != "mem" {
            return Err(ConfigError::NotMem(raw.to_owned()));
        }
        if url.host_str().is_some_and(|h| !h.is_empty())
            || !matches!(url.path(), "" | "/")
            || !url.username().is_empty()
            || url.password().is_some()
            || url.port().is_some()
            || url.fragment().is_some()
        {
            return Err(ConfigError::Unexpected(raw.to_owned()));
        }
        let mut config = MemConfig::new();
        let mut seen = false;
        for (name, value) in url.query_pairs() {
            match name.as_ref() {
                "max_records" if seen => return Err(ConfigError::Repeated(name.into_owned())),
                "max_records" => {
                    seen = true;
                    let max: usize = value.parse().map_err(|err: std::num::ParseIntError| {
                        ConfigError::BadValue {
                            name: name.to_string(),
                            value: value.to_string(),
                            reason: err.to_string(),
                        }
                    })?;
                    config = config.with_max_records(max)?;
                }
                _ => return Err(ConfigError::UnknownOption(name.into_owned())),
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(MemConfig::from_url("mem").unwrap(), MemConfig::new());
        assert_eq!(MemConfig::from_url("mem://").unwrap(), MemConfig::new());
        assert_eq!(
            MemConfig::from_url("mem://?max_records=7")
                .unwrap()
                .max_records(),
            Some(7)
        );
        for bad in [
            "memory",
            "redb:///x",
            "mem://h",
            "mem:///path",
            "mem://u@",
            "mem://?x=1",
            "mem://?max_records=0",
            "mem://?max_records=-1",
            "mem://?max_records=1&max_records=2",
            "mem://#f",
        ] {
            assert!(MemConfig::from_url(bad).is_err(), "{bad}");
        }
    }
}
