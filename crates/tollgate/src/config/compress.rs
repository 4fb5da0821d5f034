//! `compress = { … }` on an http-mode frontend or a route: which responses tollgate
//! compresses, with which codings and levels (`http::compress` does it). A route's table
//! replaces its frontend's; `algorithms = []` on a route turns compression off for it.
//!
//! Refused at load: on a tcp-mode frontend or route (no response to compress), an unknown
//! or repeated algorithm, a type that is not `type/subtype` or `type/*`, and a level outside
//! the coding's range (gzip 1..=9, br 0..=11, zstd 1..=19).

use std::ops::Range;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::file::ModeName;
use super::units::ByteSize;
use crate::http::compress::{self, Coding, Policy};

type Errors = Vec<(Range<usize>, String, String)>;

/// `compress` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CompressSection {
    /// In order of preference; default `["zstd", "gzip", "br"]`.
    pub algorithms: Option<Spanned<Vec<Spanned<String>>>>,
    /// Media types (`text/*`, `application/json`); default `http::compress::DEFAULT_TYPES`.
    pub types: Option<Spanned<Vec<Spanned<String>>>>,
    pub min_size: Option<Spanned<ByteSize>>,
    pub level: Option<Spanned<LevelSection>>,
}

/// `level = { gzip = 4, br = 3, zstd = 3 }`: each coding's level (a coding not named keeps
/// its default).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LevelSection {
    pub gzip: Option<Spanned<i64>>,
    pub br: Option<Spanned<i64>>,
    pub zstd: Option<Spanned<i64>>,
}

/// The policy of `section`, or `None` when it is absent or refused (errors pushed).
pub(super) fn policy(
    section: Option<&Spanned<CompressSection>>,
    mode: ModeName,
    key: &str,
    errors: &mut Errors,
) -> Option<Arc<Policy>> {
    let section = section?;
    let key = format!("{key}.compress");
    if mode != ModeName::Http {
        errors.push((
            section.span(),
            key,
            "compression needs http mode (a tcp frontend sees no response)".into(),
        ));
        return None;
    }
    let s = section.get_ref();
    let before = errors.len();
    let mut codings = Vec::new();
    match &s.algorithms {
        None => codings.extend(Coding::ALL),
        Some(list) => {
            for name in list.get_ref() {
                match Coding::from_name(name.get_ref()) {
                    Some(c) if codings.contains(&c) => errors.push((
                        name.span(),
                        format!("{key}.algorithms"),
                        format!("`{}` is listed twice", name.get_ref()),
                    )),
                    Some(c) => codings.push(c),
                    None => errors.push((
                        name.span(),
                        format!("{key}.algorithms"),
                        format!("unknown algorithm `{}`: one of zstd, gzip, br", name.get_ref()),
                    )),
                }
            }
        }
    }
    let types: Vec<Box<str>> = match &s.types {
        None => compress::DEFAULT_TYPES.iter().map(|t| Box::from(*t)).collect(),
        Some(list) => list
            .get_ref()
            .iter()
            .filter_map(|t| {
                let v = t.get_ref().trim().to_ascii_lowercase();
                if Policy::valid_type(&v) {
                    Some(v.into_boxed_str())
                } else {
                    errors.push((
                        t.span(),
                        format!("{key}.types"),
                        format!("`{}` is not a media type (`type/subtype` or `type/*`)", t.get_ref()),
                    ));
                    None
                }
            })
            .collect(),
    };
    let mut level = |v: Option<&Spanned<i64>>, name: &str, range: Range<i64>, default: i64| -> i64 {
        match v {
            None => default,
            Some(l) if range.contains(l.get_ref()) => *l.get_ref(),
            Some(l) => {
                errors.push((
                    l.span(),
                    format!("{key}.level.{name}"),
                    format!("{name} levels go from {} to {}", range.start, range.end - 1),
                ));
                default
            }
        }
    };
    let levels = s.level.as_ref().map(Spanned::get_ref);
    let gzip = level(
        levels.and_then(|l| l.gzip.as_ref()),
        "gzip",
        1..10,
        compress::DEFAULT_GZIP_LEVEL.into(),
    );
    let br = level(
        levels.and_then(|l| l.br.as_ref()),
        "br",
        0..12,
        compress::DEFAULT_BR_LEVEL.into(),
    );
    let zstd = level(
        levels.and_then(|l| l.zstd.as_ref()),
        "zstd",
        1..20,
        compress::DEFAULT_ZSTD_LEVEL.into(),
    );
    if errors.len() > before {
        return None;
    }
    Some(Arc::new(Policy {
        codings,
        types,
        min_size: s
            .min_size
            .as_ref()
            .map_or(compress::DEFAULT_MIN_SIZE, |m| m.get_ref().0),
        gzip_level: u32::try_from(gzip).unwrap_or(compress::DEFAULT_GZIP_LEVEL),
        br_level: u32::try_from(br).unwrap_or(compress::DEFAULT_BR_LEVEL),
        zstd_level: i32::try_from(zstd).unwrap_or(compress::DEFAULT_ZSTD_LEVEL),
    }))
}
