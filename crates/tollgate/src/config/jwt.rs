//! `auth = { jwt = { … } }`: bearer tokens checked against a JWKS (`auth::jwt` does it).
//!
//! ```toml
//! auth = { jwt = { jwks_url = "https://idp.example/.well-known/jwks.json",
//!                  issuer = "https://idp.example/", audience = ["api"],
//!                  algorithms = ["RS256", "ES256"], leeway = "30s", refresh = "5m",
//!                  claims_to_headers = { sub = "x-user", "realm_access.roles" = "x-roles" } } }
//! ```
//!
//! Refused at load: neither or both of `jwks_file` and `jwks_url`; a URL that is not
//! `http://` or `https://` with a host; a `jwks_file` that cannot be read or is not a usable
//! JWKS (64 KiB and 64 keys at most); no `algorithms`, an unknown one, `none` or an HMAC one
//! (a shared secret has no place in a public JWKS, and allowing HS next to RS is how a
//! public key gets used as an HMAC secret); a `leeway` over 5 minutes; a `refresh` outside
//! 30 s..=1 d or with `jwks_file`; a claim header that is not a valid name, repeated, or one
//! the proxy owns (hop-by-hop fields, `host`, `content-length`, `authorization`).
//! Whether `auth` may appear where it is (http mode) is the caller's check.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::bounded::read_bounded;
use super::units::{DurationValue, human_duration};
use crate::auth::jwt::{self, Algorithm, JwksSource, JwksUrl, JwtPolicy, KeySet};

type Errors = Vec<(Range<usize>, String, String)>;

/// `refresh` bounds: often enough to pick up a rotation, never a hammering.
const MIN_REFRESH: Duration = Duration::from_secs(30);
const MAX_REFRESH: Duration = Duration::from_secs(86_400);
/// The most claims one policy copies into headers.
const MAX_CLAIM_HEADERS: usize = 32;

/// Headers a claim may not set besides the hop-by-hop and framing ones: `host` routes,
/// and the authorization fields carry the token itself.
const OWNED_HEADERS: [&str; 3] = ["host", "authorization", "proxy-authorization"];

/// `jwt` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JwtSection {
    pub jwks_file: Option<Spanned<String>>,
    pub jwks_url: Option<Spanned<String>>,
    pub issuer: Option<Spanned<String>>,
    pub audience: Option<Spanned<AudienceSection>>,
    pub algorithms: Option<Spanned<Vec<Spanned<String>>>>,
    /// Default `jwt::DEFAULT_LEEWAY`.
    pub leeway: Option<Spanned<DurationValue>>,
    /// `claim = "header-name"`; a claim may be a dotted path (`realm_access.roles`).
    pub claims_to_headers: Option<Spanned<BTreeMap<Spanned<String>, Spanned<String>>>>,
    /// Default `jwt::DEFAULT_REFRESH`; `jwks_url` only.
    pub refresh: Option<Spanned<DurationValue>>,
    /// Default true.
    pub require_exp: Option<Spanned<bool>>,
}

/// `audience = "api"` or `audience = ["api", "web"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum AudienceSection {
    One(String),
    Many(Vec<String>),
}

/// The policy of `section` and where its keys come from, or `None` with errors pushed.
/// `key` is the path of the `jwt` table itself (`frontend.web.auth.jwt`); a relative
/// `jwks_file` is taken from `base_dir` (the config file's directory).
pub(crate) fn policy(
    section: &Spanned<JwtSection>,
    key: &str,
    base_dir: Option<&Path>,
    errors: &mut Errors,
) -> Option<(JwtPolicy, JwksSource)> {
    let s = section.get_ref();
    let before = errors.len();
    let mut err = |span: Range<usize>, sub: &str, msg: String| {
        let k = if sub.is_empty() {
            key.to_string()
        } else {
            format!("{key}.{sub}")
        };
        errors.push((span, k, msg));
    };

    let source = match (&s.jwks_file, &s.jwks_url) {
        (None, None) => {
            err(
                section.span(),
                "",
                "needs `jwks_file` or `jwks_url`: where the keys that sign the tokens come from".into(),
            );
            None
        }
        (Some(_), Some(url)) => {
            err(
                url.span(),
                "jwks_url",
                "`jwks_file` and `jwks_url` exclude each other: name one".into(),
            );
            None
        }
        (Some(file), None) => {
            if let Some(r) = &s.refresh {
                err(
                    r.span(),
                    "refresh",
                    "applies to `jwks_url`: a `jwks_file` is read at load (a reload reads it again)".into(),
                );
            }
            let text = file.get_ref();
            let path = match base_dir {
                Some(base) if Path::new(text).is_relative() => base.join(text),
                _ => Path::new(text).to_path_buf(),
            };
            match read_bounded(&path, jwt::MAX_JWKS as u64)
                .map_err(|e| e.to_string())
                .and_then(|bytes| KeySet::from_jwks(&bytes))
            {
                Ok(keys) => Some(JwksSource::File { path, keys }),
                Err(why) => {
                    err(file.span(), "jwks_file", format!("{}: {why}", path.display()));
                    None
                }
            }
        }
        (None, Some(url)) => {
            let refresh = match &s.refresh {
                None => Some(jwt::DEFAULT_REFRESH),
                Some(r) if (MIN_REFRESH..=MAX_REFRESH).contains(&r.get_ref().0) => Some(r.get_ref().0),
                Some(r) => {
                    err(
                        r.span(),
                        "refresh",
                        format!(
                            "goes from {} to {}",
                            human_duration(MIN_REFRESH),
                            human_duration(MAX_REFRESH)
                        ),
                    );
                    None
                }
            };
            match parse_url(url.get_ref()) {
                Ok(uri) => refresh.map(|refresh| JwksSource::Url(JwksUrl { url: uri, refresh })),
                Err(why) => {
                    err(url.span(), "jwks_url", why);
                    None
                }
            }
        }
    };

    let mut algorithms = Vec::new();
    match &s.algorithms {
        None => err(
            section.span(),
            "algorithms",
            "is required: the signature algorithms your identity provider uses, e.g. [\"RS256\"]".into(),
        ),
        Some(list) if list.get_ref().is_empty() => {
            err(list.span(), "algorithms", "is empty: no token could verify".into())
        }
        Some(list) => {
            for name in list.get_ref() {
                match algorithm(name.get_ref()) {
                    Ok(a) if algorithms.contains(&a) => err(
                        name.span(),
                        "algorithms",
                        format!("`{}` is listed twice", name.get_ref()),
                    ),
                    Ok(a) => algorithms.push(a),
                    Err(why) => err(name.span(), "algorithms", why),
                }
            }
        }
    }

    let issuer = match &s.issuer {
        Some(i) if i.get_ref().is_empty() => {
            err(i.span(), "issuer", "is empty: leave it out to accept any issuer".into());
            None
        }
        other => other.as_ref().map(|i| i.get_ref().clone()),
    };

    let audience = s.audience.as_ref().and_then(|a| {
        let list = match a.get_ref() {
            AudienceSection::One(one) => vec![one.clone()],
            AudienceSection::Many(many) => many.clone(),
        };
        if list.is_empty() || list.iter().any(String::is_empty) {
            err(
                a.span(),
                "audience",
                "needs non-empty names (leave it out to accept tokens without `aud`)".into(),
            );
            return None;
        }
        Some(list)
    });

    let leeway = match &s.leeway {
        None => jwt::DEFAULT_LEEWAY,
        Some(l) if l.get_ref().0 <= jwt::MAX_LEEWAY => l.get_ref().0,
        Some(l) => {
            err(
                l.span(),
                "leeway",
                format!(
                    "is at most {}: a longer one keeps expired tokens valid",
                    human_duration(jwt::MAX_LEEWAY)
                ),
            );
            jwt::DEFAULT_LEEWAY
        }
    };

    let mut claims_to_headers: Vec<(String, http::HeaderName)> = Vec::new();
    if let Some(table) = &s.claims_to_headers {
        if table.get_ref().len() > MAX_CLAIM_HEADERS {
            err(
                table.span(),
                "claims_to_headers",
                format!("names more than {MAX_CLAIM_HEADERS} claims"),
            );
        }
        for (claim, header) in table.get_ref() {
            let sub = format!("claims_to_headers.{}", claim.get_ref());
            if claim.get_ref().is_empty() || claim.get_ref().split('.').any(str::is_empty) {
                err(
                    claim.span(),
                    &sub,
                    "is not a claim name or a dotted path (`sub`, `realm_access.roles`)".into(),
                );
                continue;
            }
            match header_name(header.get_ref()) {
                Ok(name) if claims_to_headers.iter().any(|(_, h)| *h == name) => err(
                    header.span(),
                    &sub,
                    format!("header `{name}` is already set from another claim"),
                ),
                Ok(name) => claims_to_headers.push((claim.get_ref().clone(), name)),
                Err(why) => err(header.span(), &sub, why),
            }
        }
    }

    let require_exp = s.require_exp.as_ref().is_none_or(|r| *r.get_ref());

    if errors.len() > before {
        return None;
    }
    let source = source?;
    Some((
        JwtPolicy {
            issuer,
            audience,
            algorithms,
            leeway,
            claims_to_headers,
            require_exp,
        },
        source,
    ))
}

/// An `algorithms` entry: one of `jwt::ASYMMETRIC`, with a reason for anything else.
fn algorithm(name: &str) -> Result<Algorithm, String> {
    let known = || {
        jwt::ASYMMETRIC
            .iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if name.eq_ignore_ascii_case("none") {
        return Err("`none` means unsigned: anyone could write the token".into());
    }
    match Algorithm::from_str(name) {
        Ok(a) if jwt::ASYMMETRIC.contains(&a) => Ok(a),
        Ok(_) => Err(format!(
            "`{name}` is HMAC, a shared secret: tokens are checked against public keys only \
             (allowing HS with them would let anyone sign with a public key as the secret); one of {}",
            known()
        )),
        Err(_) => Err(format!("unknown algorithm `{name}`: one of {}", known())),
    }
}

/// `jwks_url`: absolute `http://` or `https://` with a host.
fn parse_url(text: &str) -> Result<http::Uri, String> {
    let uri = http::Uri::from_str(text).map_err(|e| format!("not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("https" | "http") => {}
        _ => return Err("needs an `https://` (or `http://`) URL".into()),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("needs a host".into());
    }
    Ok(uri)
}

/// A claim header's name: valid, lower-cased, not one the proxy owns.
fn header_name(text: &str) -> Result<http::HeaderName, String> {
    let name = http::HeaderName::from_bytes(text.as_bytes()).map_err(|_| format!("`{text}` is not a header name"))?;
    if OWNED_HEADERS.contains(&name.as_str()) || crate::http::h1::headers::is_hop_or_framing(name.as_str().as_bytes()) {
        return Err(format!(
            "`{name}` cannot be set from a claim: the proxy owns it (framing, connection, routing or the token itself)"
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str, dir: Option<&Path>) -> (Option<(JwtPolicy, JwksSource)>, Errors) {
        #[derive(Deserialize)]
        struct Doc {
            jwt: Spanned<JwtSection>,
        }
        let doc: Doc = toml::from_str(text).unwrap();
        let mut errors = Vec::new();
        let out = policy(&doc.jwt, "frontend.web.auth.jwt", dir, &mut errors);
        (out, errors)
    }

    fn messages(errors: &Errors) -> Vec<String> {
        errors.iter().map(|(_, k, m)| format!("{k}: {m}")).collect()
    }

    #[test]
    fn a_url_policy_with_defaults() {
        let (out, errors) = load(
            r#"jwt = { jwks_url = "https://idp.example/jwks.json", algorithms = ["RS256", "EdDSA"],
                      audience = "api", claims_to_headers = { sub = "X-User", "realm_access.roles" = "x-roles" } }"#,
            None,
        );
        assert!(errors.is_empty(), "{:?}", messages(&errors));
        let (policy, source) = out.unwrap();
        assert_eq!(policy.algorithms, vec![Algorithm::RS256, Algorithm::EdDSA]);
        assert_eq!(policy.audience, Some(vec!["api".to_string()]));
        assert_eq!(policy.leeway, jwt::DEFAULT_LEEWAY);
        assert!(policy.require_exp);
        let names: Vec<_> = policy
            .claims_to_headers
            .iter()
            .map(|(c, h)| (c.as_str(), h.as_str()))
            .collect();
        assert_eq!(names, vec![("realm_access.roles", "x-roles"), ("sub", "x-user")]);
        match source {
            JwksSource::Url(u) => {
                assert_eq!(u.url.host(), Some("idp.example"));
                assert_eq!(u.refresh, jwt::DEFAULT_REFRESH);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refusals_say_why() {
        let cases: &[(&str, &str)] = &[
            (r#"jwt = { algorithms = ["RS256"] }"#, "needs `jwks_file` or `jwks_url`"),
            (
                r#"jwt = { jwks_url = "https://a/", jwks_file = "k.json", algorithms = ["RS256"] }"#,
                "exclude each other",
            ),
            (
                r#"jwt = { jwks_url = "ftp://a/k", algorithms = ["RS256"] }"#,
                "https://",
            ),
            (r#"jwt = { jwks_url = "https://a/k" }"#, "algorithms: is required"),
            (r#"jwt = { jwks_url = "https://a/k", algorithms = [] }"#, "is empty"),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["none"] }"#,
                "unsigned",
            ),
            (r#"jwt = { jwks_url = "https://a/k", algorithms = ["HS256"] }"#, "HMAC"),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS257"] }"#,
                "unknown algorithm",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256", "RS256"] }"#,
                "twice",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], leeway = "6m" }"#,
                "at most",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], refresh = "1s" }"#,
                "goes from",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], claims_to_headers = { sub = "Host" } }"#,
                "proxy owns it",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], claims_to_headers = { sub = "authorization" } }"#,
                "proxy owns it",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], claims_to_headers = { sub = "transfer-encoding" } }"#,
                "proxy owns it",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], claims_to_headers = { sub = "bad name" } }"#,
                "not a header name",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], claims_to_headers = { sub = "x-a", email = "X-A" } }"#,
                "already set",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], claims_to_headers = { "a..b" = "x-a" } }"#,
                "dotted path",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], audience = [] }"#,
                "non-empty",
            ),
            (
                r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], issuer = "" }"#,
                "is empty",
            ),
            (
                r#"jwt = { jwks_file = "/nonexistent/k.json", algorithms = ["RS256"] }"#,
                "/nonexistent/k.json",
            ),
        ];
        for (text, want) in cases {
            let (out, errors) = load(text, None);
            assert!(out.is_none(), "{text}");
            let all = messages(&errors).join(" | ");
            assert!(all.contains(want), "{text}: {all}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        #[derive(Deserialize, Debug)]
        struct Doc {
            #[allow(dead_code)]
            jwt: Spanned<JwtSection>,
        }
        let e = toml::from_str::<Doc>(r#"jwt = { jwks_url = "https://a/k", algorithms = ["RS256"], secret = "x" }"#)
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `secret`"), "{e}");
    }

    #[test]
    fn a_file_policy_reads_its_jwks_relative_to_the_config() {
        let dir = std::env::temp_dir().join(format!("tollgate-jwt-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let jwks = crate::auth::jwt::tests::jwks_of(&[crate::auth::jwt::tests::ed25519_key("k1").public_jwk()]);
        std::fs::write(dir.join("keys.json"), jwks).unwrap();
        let (out, errors) = load(
            r#"jwt = { jwks_file = "keys.json", algorithms = ["EdDSA"], leeway = "0s", require_exp = false }"#,
            Some(&dir),
        );
        assert!(errors.is_empty(), "{:?}", messages(&errors));
        let (policy, source) = out.unwrap();
        assert_eq!(policy.leeway, Duration::ZERO);
        assert!(!policy.require_exp);
        match source {
            JwksSource::File { path, keys } => {
                assert_eq!(path, dir.join("keys.json"));
                assert_eq!(keys.kids(), vec![Some("k1")]);
            }
            other => panic!("{other:?}"),
        }
        std::fs::write(dir.join("bad.json"), b"{\"keys\": 3}").unwrap();
        let (out, errors) = load(
            r#"jwt = { jwks_file = "bad.json", algorithms = ["EdDSA"] }"#,
            Some(&dir),
        );
        assert!(out.is_none());
        assert!(
            messages(&errors).join("").contains("not a JWKS"),
            "{:?}",
            messages(&errors)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
