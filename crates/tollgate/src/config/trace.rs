//! `[[frontend]] trace = { sample = 0.01 }`: a request that comes without a readable W3C
//! `traceparent` starts a trace with this probability (`http::trace`): tollgate sends its
//! server a new `traceparent` (flags `01`, sampled) and logs its trace ID (`trace_id`).
//! A `traceparent` the client sent is always forwarded untouched, with or without `trace`.
//!
//! Refused at load: on a tcp-mode frontend (no request), and a `sample` outside 0..=1.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::file::ModeName;

type Errors = Vec<(Range<usize>, String, String)>;

/// `trace` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TraceSection {
    pub sample: Spanned<f64>,
}

/// A frontend's trace starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trace {
    /// Share of requests without a readable `traceparent` that start a trace, in millionths.
    pub sample_ppm: u32,
}

pub(super) fn trace(
    section: Option<&Spanned<TraceSection>>,
    mode: ModeName,
    key: &str,
    errors: &mut Errors,
) -> Option<Trace> {
    let section = section?;
    let key = format!("{key}.trace");
    if mode != ModeName::Http {
        errors.push((
            section.span(),
            key,
            "traces need an http-mode frontend (a tcp frontend sees no request)".into(),
        ));
        return None;
    }
    let sample = &section.get_ref().sample;
    let v = *sample.get_ref();
    if !(0.0..=1.0).contains(&v) {
        errors.push((
            sample.span(),
            format!("{key}.sample"),
            "is the share of requests that start a trace, from 0.0 to 1.0".into(),
        ));
        return None;
    }
    Some(Trace {
        sample_ppm: (v * 1_000_000.0).round() as u32,
    })
}
