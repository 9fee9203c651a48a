//! Passwords never leave a URL that is shown.

/// `url` with the password of its user info (`user:password@`) replaced by
/// `***`; `password=`/`secret` query values too.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{hosts}"),
            None => format!("{userinfo}@{hosts}"),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if is_secret(name) => format!("{name}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

fn is_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.contains("password") || name.contains("secret") || name.contains("token")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("scylla://app:hunter2@10.0.0.1,10.0.0.2/ks?x=1"),
            "scylla://app:***@10.0.0.1,10.0.0.2/ks?x=1"
        );
        assert_eq!(
            redact("dynamodb://t?region=r&secret_access_key=abc"),
            "dynamodb://t?region=r&secret_access_key=***"
        );
        assert_eq!(redact("redb:///a/b.redb"), "redb:///a/b.redb");
        assert_eq!(redact("mem"), "mem");
        assert_eq!(redact("scylla://user@h/ks"), "scylla://user@h/ks");
    }
}
