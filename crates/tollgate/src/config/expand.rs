//! Values from the environment: `${VAR}` and `${VAR:-default}` in string values.
//!
//! Expansion works on a string value after TOML has parsed it, never on the file's text, so
//! whatever a variable holds (quotes, newlines, `]`) stays inside that one string: the
//! environment can set a value, not add a key or a table. Keys are never expanded.
//!
//! The rules, in full: `${NAME}` is the variable's value (an unset variable is an error
//! naming it); `${NAME:-default}` is the value, or `default` when the variable is unset or
//! empty (the default is literal text up to the first `}`); `$${` is a literal `${`; any
//! other `$` is itself. `NAME` is letters, digits and `_`, not starting with a digit.
//! A value must be UTF-8. Error messages name the variable, never its value.

use std::ffi::OsString;

/// Where variables are looked up: the process environment (`std::env::var_os`) when a
/// config is loaded, a fixed table in tests.
pub(crate) type Env<'e> = &'e dyn Fn(&str) -> Option<OsString>;

/// The process environment.
pub(crate) fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// `text` with its variables expanded; `Ok(None)` when it has nothing to expand (no `$`).
pub(crate) fn expand(text: &str, env: Env<'_>) -> Result<Option<String>, String> {
    if !text.contains('$') {
        return Ok(None);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(literal) = after.strip_prefix("${") {
            out.push_str("${");
            rest = literal;
        } else if let Some(inner) = after.strip_prefix('{') {
            let end = inner
                .find('}')
                .ok_or_else(|| "`${` without its closing `}` (write `$${` for a literal `${`)".to_string())?;
            out.push_str(&variable(&inner[..end], env)?);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(Some(out))
}

/// The value of `NAME` or `NAME:-default` (what stood between `${` and `}`).
fn variable(spec: &str, env: Env<'_>) -> Result<String, String> {
    let (name, default) = match spec.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (spec, None),
    };
    if !is_variable_name(name) {
        return Err(format!(
            "`${{{spec}}}` is not a variable: a name is letters, digits and `_`, not starting with a digit \
             (`${{NAME}}`, `${{NAME:-default}}`; write `$${{` for a literal `${{`)"
        ));
    }
    let value = match env(name) {
        Some(v) => Some(
            v.into_string()
                .map_err(|_| format!("environment variable `{name}` is not UTF-8 text"))?,
        ),
        None => None,
    };
    match (value, default) {
        (Some(v), Some(d)) if v.is_empty() => Ok(d.to_string()),
        (Some(v), _) => Ok(v),
        (None, Some(d)) => Ok(d.to_string()),
        (None, None) => Err(format!(
            "environment variable `{name}` is not set (give it a default with `${{{name}:-value}}`)"
        )),
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn env(name: &str) -> Option<OsString> {
        match name {
            "HOST" => Some("10.0.0.1".into()),
            "EMPTY" => Some(OsString::new()),
            "QUOTE" => Some("a\"b\nc".into()),
            "BINARY" => Some(std::os::unix::ffi::OsStringExt::from_vec(vec![0xff])),
            _ => None,
        }
    }

    fn run(text: &str) -> Result<Option<String>, String> {
        expand(text, &env)
    }

    #[test]
    fn variables_defaults_and_escapes() {
        assert_eq!(run("no dollars").unwrap(), None);
        assert_eq!(run("${HOST}:80").unwrap().unwrap(), "10.0.0.1:80");
        assert_eq!(
            run("${UNSET:-127.0.0.1}:${HOST}").unwrap().unwrap(),
            "127.0.0.1:10.0.0.1"
        );
        // `:-` takes the default for an empty variable too; a set empty one without a
        // default is empty.
        assert_eq!(run("[${EMPTY:-d}]").unwrap().unwrap(), "[d]");
        assert_eq!(run("[${EMPTY}]").unwrap().unwrap(), "[]");
        assert_eq!(run("${UNSET:-}").unwrap().unwrap(), "");
        // A default is literal text: no nesting, a `:-` inside is kept.
        assert_eq!(run("${UNSET:-a:-b}").unwrap().unwrap(), "a:-b");
        // `$${` is a literal `${`; other dollars are themselves.
        assert_eq!(run("$${HOST}").unwrap().unwrap(), "${HOST}");
        assert_eq!(run("^/a$ costs $5 $$").unwrap().unwrap(), "^/a$ costs $5 $$");
        // A value is inserted as it is: quotes and newlines stay in the string.
        assert_eq!(run("x${QUOTE}y").unwrap().unwrap(), "xa\"b\ncy");
    }

    #[test]
    fn errors_name_the_variable_and_never_a_value() {
        let e = run("${UNSET}").unwrap_err();
        assert!(e.contains("`UNSET` is not set") && e.contains("${UNSET:-value}"), "{e}");
        let e = run("${HOST").unwrap_err();
        assert!(e.contains("without its closing `}`"), "{e}");
        for bad in ["${}", "${1X}", "${A-B}", "${ HOST}"] {
            let e = run(bad).unwrap_err();
            assert!(e.contains("is not a variable"), "{bad}: {e}");
        }
        let e = run("${BINARY}").unwrap_err();
        assert!(e.contains("`BINARY` is not UTF-8"), "{e}");
    }
}
