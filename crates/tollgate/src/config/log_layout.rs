//! What an access log line holds and which lines are written: `[log] fields` (JSON keys, in
//! order), `[log] template` (text), `sample`, `slow` and `capture_limit`, and
//! `[frontend.log]`, which overrides `fields`, `template`, `sample` and `slow` for one
//! frontend. Compiled at load into a [`LogPlan`] per frontend; `accesslog::format` writes
//! lines from it.
//!
//! Invariants: every field is one of [`FIELDS`] or `header.NAME`, `response_header.NAME`,
//! `cookie.NAME` (else `check` lists the valid ones); a template is one line of printable
//! text; the values a plan copies out of a request or response (its [`Capture`]s) are
//! deduplicated, at most [`MAX_CAPTURES`], each cut at `capture_limit` bytes, so what a
//! request holds for its log line is bounded whatever the client sends.

use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::file::ModeName;
use super::model::LogFormat;
use super::units::DurationValue;

type Errors = Vec<(Range<usize>, String, String)>;

/// Bytes of one captured value kept unless `capture_limit` says otherwise (a longer value
/// is cut and marked with `...`).
pub const DEFAULT_CAPTURE_LIMIT: usize = 256;
/// The largest `capture_limit` (a request's captures are held while it runs).
pub const MAX_CAPTURE_LIMIT: usize = 4096;
/// Distinct headers and cookies one plan may capture.
pub const MAX_CAPTURES: usize = 32;

/// `[frontend.log]` as written: the line of this frontend's requests, if not `[log]`'s.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FrontendLogSection {
    pub fields: Option<Spanned<Vec<Spanned<String>>>>,
    pub template: Option<Spanned<String>>,
    pub sample: Option<Spanned<f64>>,
    pub slow: Option<Spanned<DurationValue>>,
}

/// One value a line can show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Time,
    Client,
    ClientIp,
    ClientPort,
    Frontend,
    Backend,
    Server,
    ServerAddress,
    Route,
    Method,
    /// The request target as sent (path and query).
    Path,
    /// The target's query, without `?`.
    Query,
    Scheme,
    Version,
    Status,
    BytesToServer,
    BytesToClient,
    HeadMs,
    QueuedMs,
    ConnectedMs,
    ResponseMs,
    TotalMs,
    Retries,
    Termination,
    TerminationCode,
    TlsVersion,
    TlsCipher,
    Sni,
    ClientCertSubject,
    RequestId,
    /// The W3C trace ID: of the trace tollgate started (`[frontend] trace`), else of the
    /// `traceparent` the client sent, kept by the plan's capture at this index.
    TraceId(u8),
    /// The value kept by the plan's capture at this index.
    Captured(u8),
}

impl Field {
    /// Only an HTTP request has it (a TCP session's line shows it empty).
    fn http_only(self) -> bool {
        matches!(
            self,
            Field::Method
                | Field::Path
                | Field::Query
                | Field::Version
                | Field::HeadMs
                | Field::ResponseMs
                | Field::RequestId
                | Field::TraceId(_)
                | Field::Captured(_)
        )
    }
}

/// Where a captured value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureKind {
    /// The host the request is for: HTTP/2's `:authority`, else the `Host` field.
    Host,
    RequestHeader,
    ResponseHeader,
    Cookie,
}

/// One value copied out of a request or its response for the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    pub kind: CaptureKind,
    /// A header's name lowercase; a cookie's as written (cookie names are case-sensitive).
    pub name: Box<[u8]>,
}

/// A template's piece: text as written, or a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Literal(Box<[u8]>),
    Field(Field),
}

/// One key of a JSON line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonKey {
    pub name: Box<str>,
    pub field: Field,
    /// What goes before the value: `"name":`, with `,` before every key but the first
    /// (one copy per key when a line is written). A name needs no escaping: every field
    /// name is letters, digits and token bytes, never a quote, a backslash or a control.
    pub prefix: Box<[u8]>,
}

impl JsonKey {
    fn new(name: &str, field: Field, first: bool) -> Self {
        let comma = if first { "" } else { "," };
        JsonKey {
            name: name.into(),
            field,
            prefix: format!("{comma}\"{name}\":").into_bytes().into_boxed_slice(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// One JSON object: these keys, in this order.
    Json(Vec<JsonKey>),
    /// The fixed text layout of docs/logging.md (`format = "text"` without a template).
    FixedText,
    Template(Vec<Piece>),
}

/// A frontend's access log: the line and which requests get one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPlan {
    pub layout: Layout,
    /// What requests and responses must keep for the line (`Field::Captured` indexes it).
    pub captures: Vec<Capture>,
    pub capture_limit: usize,
    /// Share of normal streams logged, in millionths (1,000,000: every one). A stream that
    /// ended in an error, or got a 4xx or 5xx, is always logged.
    pub sample_ppm: u32,
    /// A stream that lasted at least this long is always logged.
    pub slow: Option<Duration>,
    /// The line shows `client_cert_subject` (worked out per request only then).
    pub client_cert_subject: bool,
}

impl Default for LogPlan {
    fn default() -> Self {
        LogPlan {
            layout: Layout::Json(default_json()),
            captures: Vec::new(),
            capture_limit: DEFAULT_CAPTURE_LIMIT,
            sample_ppm: 1_000_000,
            slow: None,
            client_cert_subject: false,
        }
    }
}

impl LogPlan {
    /// Whether the line has `field` (what is costly to gather is gathered only then).
    pub fn shows(&self, field: Field) -> bool {
        match &self.layout {
            Layout::Json(keys) => keys.iter().any(|k| k.field == field),
            Layout::FixedText => false,
            Layout::Template(pieces) => pieces.contains(&Piece::Field(field)),
        }
    }

    /// Whether a stream is logged: errors, 4xx/5xx and slow ones always; the rest as the
    /// sample says, `draw` being a uniform value in `0..1_000_000`.
    pub fn keeps(&self, status: u16, failed: bool, total: Duration, draw: impl FnOnce() -> u32) -> bool {
        self.sample_ppm >= 1_000_000
            || failed
            || status >= 400
            || self.slow.is_some_and(|s| total >= s)
            || (self.sample_ppm > 0 && draw() < self.sample_ppm)
    }
}

/// The named fields, as written in `fields` and templates, in the order docs/logging.md
/// lists them. `host`, `user_agent` and `referer` are captures.
pub const FIELDS: &[(&str, Field)] = &[
    ("time", Field::Time),
    ("client", Field::Client),
    ("client_ip", Field::ClientIp),
    ("client_port", Field::ClientPort),
    ("frontend", Field::Frontend),
    ("backend", Field::Backend),
    ("server", Field::Server),
    ("server_address", Field::ServerAddress),
    ("route", Field::Route),
    ("method", Field::Method),
    ("path", Field::Path),
    ("query", Field::Query),
    ("scheme", Field::Scheme),
    ("version", Field::Version),
    ("status", Field::Status),
    ("bytes_to_server", Field::BytesToServer),
    ("bytes_to_client", Field::BytesToClient),
    ("head_ms", Field::HeadMs),
    ("queued_ms", Field::QueuedMs),
    ("connected_ms", Field::ConnectedMs),
    ("response_ms", Field::ResponseMs),
    ("total_ms", Field::TotalMs),
    ("retries", Field::Retries),
    ("termination", Field::Termination),
    ("termination_code", Field::TerminationCode),
    ("tls_version", Field::TlsVersion),
    ("tls_cipher", Field::TlsCipher),
    ("sni", Field::Sni),
    ("client_cert_subject", Field::ClientCertSubject),
    ("request_id", Field::RequestId),
];

/// Names that stand for a capture.
const CAPTURED: &[(&str, CaptureKind, &str)] = &[
    ("host", CaptureKind::Host, "host"),
    ("user_agent", CaptureKind::RequestHeader, "user-agent"),
    ("referer", CaptureKind::RequestHeader, "referer"),
];

/// Prefixes of the fields that name what they capture.
const PREFIXES: &[(&str, CaptureKind)] = &[
    ("header.", CaptureKind::RequestHeader),
    ("response_header.", CaptureKind::ResponseHeader),
    ("cookie.", CaptureKind::Cookie),
];

/// The JSON line's keys when `fields` is not set (the line docs/logging.md shows first).
const DEFAULT_JSON: &[&str] = &[
    "time",
    "client",
    "frontend",
    "backend",
    "server",
    "method",
    "path",
    "status",
    "bytes_to_server",
    "bytes_to_client",
    "head_ms",
    "queued_ms",
    "connected_ms",
    "response_ms",
    "total_ms",
    "retries",
    "termination",
    "termination_code",
    "tls_version",
    "sni",
    "request_id",
];

fn default_json() -> Vec<JsonKey> {
    DEFAULT_JSON
        .iter()
        .enumerate()
        .filter_map(|(i, name)| {
            let field = FIELDS.iter().find(|(n, _)| n == name)?.1;
            Some(JsonKey::new(name, field, i == 0))
        })
        .collect()
}

/// Every name a field may have, for an error message.
fn valid_list() -> String {
    let mut names: Vec<&str> = FIELDS.iter().map(|(n, _)| *n).collect();
    names.extend(CAPTURED.iter().map(|(n, _, _)| *n));
    names.push("trace_id");
    names.extend(["header.NAME", "response_header.NAME", "cookie.NAME"]);
    names.join(", ")
}

/// The plan's fields and captures as they are built.
struct Builder<'e> {
    captures: Vec<Capture>,
    errors: &'e mut Errors,
}

impl Builder<'_> {
    /// The field `name` stands for (a capture is added once), or an error at `span`.
    fn field(&mut self, name: &str, span: Range<usize>, key: &str) -> Option<Field> {
        if let Some((_, f)) = FIELDS.iter().find(|(n, _)| *n == name) {
            return Some(*f);
        }
        if name == "trace_id" {
            return match self.field("header.traceparent", span, key)? {
                Field::Captured(i) => Some(Field::TraceId(i)),
                other => Some(other),
            };
        }
        let capture = if let Some((_, kind, header)) = CAPTURED.iter().find(|(n, _, _)| *n == name) {
            Some((*kind, header.as_bytes().to_vec()))
        } else {
            PREFIXES.iter().find_map(|(prefix, kind)| {
                let rest = name.strip_prefix(prefix)?;
                let ok = !rest.is_empty() && rest.bytes().all(super::request_id::is_tchar);
                // Field names are case-insensitive, cookie names are not.
                let rest = if *kind == CaptureKind::Cookie {
                    rest.to_string()
                } else {
                    rest.to_ascii_lowercase()
                };
                ok.then(|| (*kind, rest.into_bytes()))
            })
        };
        let Some((kind, name_bytes)) = capture else {
            self.errors.push((
                span,
                key.into(),
                format!("unknown field `{name}`; the fields are: {}", valid_list()),
            ));
            return None;
        };
        let capture = Capture {
            kind,
            name: name_bytes.into_boxed_slice(),
        };
        let at = match self.captures.iter().position(|c| *c == capture) {
            Some(at) => at,
            None if self.captures.len() >= MAX_CAPTURES => {
                self.errors.push((
                    span,
                    key.into(),
                    format!("at most {MAX_CAPTURES} distinct headers and cookies are captured per line"),
                ));
                return None;
            }
            None => {
                self.captures.push(capture);
                self.captures.len() - 1
            }
        };
        Some(Field::Captured(at as u8))
    }

    fn json(&mut self, fields: &Spanned<Vec<Spanned<String>>>, key: &str) -> Vec<JsonKey> {
        let key = format!("{key}.fields");
        if fields.get_ref().is_empty() {
            self.errors.push((fields.span(), key.clone(), "names no field".into()));
        }
        let mut out: Vec<JsonKey> = Vec::new();
        for name in fields.get_ref() {
            let Some(field) = self.field(name.get_ref(), name.span(), &key) else {
                continue;
            };
            if out.iter().any(|k| *k.name == **name.get_ref()) {
                self.errors.push((
                    name.span(),
                    key.clone(),
                    format!("`{}` is listed twice", name.get_ref()),
                ));
                continue;
            }
            out.push(JsonKey::new(name.get_ref(), field, out.is_empty()));
        }
        out
    }

    /// `{name}` is a field, `{{` and `}}` are braces; the rest is kept as written.
    fn template(&mut self, template: &Spanned<String>, key: &str) -> Vec<Piece> {
        let key = format!("{key}.template");
        let text = template.get_ref();
        if let Some(c) = text.chars().find(|c| c.is_control()) {
            self.errors.push((
                template.span(),
                key,
                format!("holds the control character {c:?}: a template is one line of text"),
            ));
            return Vec::new();
        }
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text.as_str();
        while let Some(c) = rest.chars().next() {
            if let Some(after) = rest.strip_prefix("{{") {
                literal.push('{');
                rest = after;
            } else if let Some(after) = rest.strip_prefix("}}") {
                literal.push('}');
                rest = after;
            } else if c == '{' {
                let Some(end) = rest.find('}') else {
                    self.errors.push((
                        template.span(),
                        key,
                        "a `{` is not closed (write `{{` for a brace)".into(),
                    ));
                    return Vec::new();
                };
                let name = rest.get(1..end).unwrap_or_default();
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(
                        std::mem::take(&mut literal).into_bytes().into_boxed_slice(),
                    ));
                }
                if let Some(field) = self.field(name.trim(), template.span(), &key) {
                    pieces.push(Piece::Field(field));
                }
                rest = rest.get(end + 1..).unwrap_or_default();
            } else if c == '}' {
                self.errors.push((
                    template.span(),
                    key,
                    "a `}` opens nothing (write `}}` for a brace)".into(),
                ));
                return Vec::new();
            } else {
                literal.push(c);
                rest = rest.get(c.len_utf8()..).unwrap_or_default();
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal.into_bytes().into_boxed_slice()));
        }
        if !pieces.iter().any(|p| matches!(p, Piece::Field(_))) {
            self.errors.push((
                template.span(),
                key,
                "names no field (`{status}`, `{path}`, ...)".into(),
            ));
        }
        pieces
    }
}

/// What `[log]` and `[frontend.log]` say of the line, as written.
pub(crate) struct LayoutKeys<'a> {
    pub fields: Option<&'a Spanned<Vec<Spanned<String>>>>,
    pub template: Option<&'a Spanned<String>>,
    pub sample: Option<&'a Spanned<f64>>,
    pub slow: Option<&'a Spanned<DurationValue>>,
}

/// `[log]`'s plan: `key` is `log`.
pub(crate) fn plan(keys: &LayoutKeys<'_>, format: LogFormat, capture_limit: usize, errors: &mut Errors) -> LogPlan {
    let base = LogPlan {
        layout: match format {
            LogFormat::Json => Layout::Json(default_json()),
            LogFormat::Text => Layout::FixedText,
        },
        capture_limit,
        ..LogPlan::default()
    };
    build(keys, &base, format, "log", None, errors)
}

/// A frontend's plan: `[log]`'s, with what its `[frontend.log]` overrides.
pub(crate) fn frontend_plan(
    section: Option<&Spanned<FrontendLogSection>>,
    global: &LogPlan,
    format: LogFormat,
    mode: ModeName,
    key: &str,
    errors: &mut Errors,
) -> LogPlan {
    let Some(section) = section else {
        return global.clone();
    };
    let s = section.get_ref();
    let keys = LayoutKeys {
        fields: s.fields.as_ref(),
        template: s.template.as_ref(),
        sample: s.sample.as_ref(),
        slow: s.slow.as_ref(),
    };
    build(&keys, global, format, &format!("{key}.log"), Some(mode), errors)
}

/// `base` with what `keys` set. `mode`: a frontend's own section, whose HTTP-only fields a
/// tcp-mode frontend refuses (its lines could never show them).
fn build(
    keys: &LayoutKeys<'_>,
    base: &LogPlan,
    format: LogFormat,
    key: &str,
    mode: Option<ModeName>,
    errors: &mut Errors,
) -> LogPlan {
    let mut out = base.clone();
    let mut b = Builder {
        captures: Vec::new(),
        errors,
    };
    match (keys.fields, keys.template, format) {
        (Some(fields), _, LogFormat::Text) => b.errors.push((
            fields.span(),
            format!("{key}.fields"),
            "picks the keys of a JSON line: with `log.format = \"text\"`, write a `template`".into(),
        )),
        (_, Some(template), LogFormat::Json) => b.errors.push((
            template.span(),
            format!("{key}.template"),
            "lays out a text line: set `log.format = \"text\"`, or pick JSON keys with `fields`".into(),
        )),
        (Some(fields), _, LogFormat::Json) => {
            out.layout = Layout::Json(b.json(fields, key));
            out.captures = std::mem::take(&mut b.captures);
        }
        (_, Some(template), LogFormat::Text) => {
            out.layout = Layout::Template(b.template(template, key));
            out.captures = std::mem::take(&mut b.captures);
        }
        (None, None, _) => {}
    }
    if mode == Some(ModeName::Tcp) && (keys.fields.is_some() || keys.template.is_some()) {
        let span = keys
            .fields
            .map(Spanned::span)
            .or(keys.template.map(Spanned::span))
            .unwrap_or_default();
        if let Some(f) = http_field(&out.layout) {
            b.errors.push((
                span,
                key.to_string(),
                format!("`{f}` is an HTTP request's: a tcp-mode frontend's lines never have it"),
            ));
        }
    }
    if let Some(sample) = keys.sample {
        let v = *sample.get_ref();
        if !(0.0..=1.0).contains(&v) {
            b.errors.push((
                sample.span(),
                format!("{key}.sample"),
                "is the share of normal requests logged, from 0.0 to 1.0".into(),
            ));
        } else {
            out.sample_ppm = (v * 1_000_000.0).round() as u32;
        }
    }
    out.client_cert_subject = out.shows(Field::ClientCertSubject);
    if let Some(slow) = keys.slow {
        if slow.get_ref().0 < Duration::from_millis(1) {
            b.errors
                .push((slow.span(), format!("{key}.slow"), "must be at least 1ms".into()));
        } else {
            out.slow = Some(slow.get_ref().0);
        }
    }
    out
}

/// The name of the first field of `layout` only HTTP requests have, if any.
fn http_field(layout: &Layout) -> Option<String> {
    let fields: Vec<Field> = match layout {
        Layout::Json(keys) => keys.iter().map(|k| k.field).collect(),
        Layout::FixedText => Vec::new(),
        Layout::Template(pieces) => pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Field(f) => Some(*f),
                Piece::Literal(_) => None,
            })
            .collect(),
    };
    let f = fields.into_iter().find(|f| f.http_only())?;
    Some(match f {
        Field::Captured(_) => "a captured header or cookie".into(),
        other => FIELDS
            .iter()
            .find(|(_, g)| *g == other)
            .map_or_else(String::new, |(n, _)| (*n).into()),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    /// The config with `log` and `frontend_log` (in the frontend, `mode` given) parsed.
    fn parse(log: &str, mode: &str, frontend_log: &str) -> Result<crate::config::model::Config, String> {
        let text = format!(
            "[log]\naccess = \"stdout\"\n{log}\n[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\nmode = \"{mode}\"\n\
             default_backend = \"b\"\n{frontend_log}\n[[backend]]\nname = \"b\"\nmode = \"{mode}\"\n\
             [[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:1\"\n"
        );
        crate::config::parse(&text, "t.toml").map_err(|e| e.to_string())
    }

    fn plan(log: &str) -> LogPlan {
        (*parse(log, "http", "").unwrap().frontends[0].log).clone()
    }

    fn refused(log: &str, mode: &str, frontend_log: &str) -> String {
        parse(log, mode, frontend_log).unwrap_err()
    }

    #[test]
    fn fields_name_keys_in_order_and_captures_once() {
        let p = plan(
            "fields = [\"status\", \"header.User-Agent\", \"user_agent\", \"cookie.SID\", \"response_header.Server\", \"host\"]",
        );
        let Layout::Json(keys) = &p.layout else { panic!("{p:?}") };
        let names: Vec<&str> = keys.iter().map(|k| &*k.name).collect();
        assert_eq!(
            names,
            [
                "status",
                "header.User-Agent",
                "user_agent",
                "cookie.SID",
                "response_header.Server",
                "host"
            ]
        );
        assert_eq!(keys[1].field, Field::Captured(0));
        assert_eq!(keys[2].field, Field::Captured(0), "the same field, captured once");
        assert_eq!(
            (&*keys[0].prefix, &*keys[1].prefix),
            (&b"\"status\":"[..], &b",\"header.User-Agent\":"[..])
        );
        let caps: Vec<(CaptureKind, &[u8])> = p.captures.iter().map(|c| (c.kind, &*c.name)).collect();
        assert_eq!(
            caps,
            [
                (CaptureKind::RequestHeader, &b"user-agent"[..]),
                (CaptureKind::Cookie, b"SID"),
                (CaptureKind::ResponseHeader, b"server"),
                (CaptureKind::Host, b"host"),
            ]
        );
        assert_eq!(
            (p.sample_ppm, p.slow, p.capture_limit),
            (1_000_000, None, DEFAULT_CAPTURE_LIMIT)
        );
        assert_eq!(plan(""), LogPlan::default(), "no fields: the documented default line");
    }

    #[test]
    fn a_template_splits_into_text_and_fields() {
        let p = plan("format = \"text\"\ntemplate = '{client} \"{method} {path}\" {{x}} {status}'");
        let Layout::Template(pieces) = &p.layout else {
            panic!("{p:?}")
        };
        let lit = |s: &str| Piece::Literal(s.as_bytes().into());
        assert_eq!(
            *pieces,
            [
                Piece::Field(Field::Client),
                lit(" \""),
                Piece::Field(Field::Method),
                lit(" "),
                Piece::Field(Field::Path),
                lit("\" {x} "),
                Piece::Field(Field::Status),
            ]
        );
        assert_eq!(plan("format = \"text\"").layout, Layout::FixedText);
    }

    #[test]
    fn unknown_and_misplaced_keys_are_refused_with_the_valid_list() {
        let e = refused("fields = [\"status\", \"user-agent\"]", "http", "");
        assert!(
            e.contains("log.fields") && e.contains("unknown field `user-agent`"),
            "{e}"
        );
        assert!(
            e.contains("user_agent") && e.contains("header.NAME") && e.contains("tls_cipher"),
            "{e}"
        );
        let e = refused("format = \"text\"\ntemplate = \"{status} {nope}\"", "http", "");
        assert!(e.contains("log.template") && e.contains("unknown field `nope`"), "{e}");
        let e = refused("fields = [\"status\"]\nformat = \"text\"", "http", "");
        assert!(e.contains("write a `template`"), "{e}");
        let e = refused("template = \"{status}\"", "http", "");
        assert!(
            e.contains("log.format = \\\"text\\\"") || e.contains("set `log.format"),
            "{e}"
        );
        let e = refused("fields = [\"status\", \"status\"]", "http", "");
        assert!(e.contains("listed twice"), "{e}");
        let e = refused("fields = []", "http", "");
        assert!(e.contains("names no field"), "{e}");
        let e = refused("fields = [\"header.\"]", "http", "");
        assert!(e.contains("unknown field `header.`"), "{e}");
        let e = refused("fields = [\"header.a b\"]", "http", "");
        assert!(e.contains("unknown field"), "{e}");
    }

    #[test]
    fn templates_are_one_line_with_balanced_braces() {
        for (template, why) in [
            ("\"{status}\\n{path}\"", "control character"),
            ("\"{status}\\u0007\"", "control character"),
            ("\"{status\"", "not closed"),
            ("\"status}\"", "opens nothing"),
            ("\"no fields\"", "names no field"),
        ] {
            let e = refused(&format!("format = \"text\"\ntemplate = {template}"), "http", "");
            assert!(e.contains(why), "{template}: {e}");
        }
    }

    #[test]
    fn sample_slow_and_capture_limit_are_bounded() {
        let p = plan("sample = 0.25\nslow = \"1s\"\ncapture_limit = 64");
        assert_eq!(
            (p.sample_ppm, p.slow, p.capture_limit),
            (250_000, Some(Duration::from_secs(1)), 64)
        );
        assert!(refused("sample = 1.5", "http", "").contains("from 0.0 to 1.0"));
        assert!(refused("sample = -0.1", "http", "").contains("from 0.0 to 1.0"));
        assert!(refused("slow = \"0s\"", "http", "").contains("at least 1ms"));
        assert!(refused("capture_limit = 0", "http", "").contains("from 1 to 4096"));
        assert!(refused("capture_limit = 5000", "http", "").contains("from 1 to 4096"));
        let many: Vec<String> = (0..=MAX_CAPTURES).map(|i| format!("\"header.x-{i}\"")).collect();
        let e = refused(&format!("fields = [{}]", many.join(", ")), "http", "");
        assert!(e.contains("at most 32"), "{e}");
    }

    #[test]
    fn a_frontend_overrides_what_it_sets_and_keeps_the_rest() {
        let c = parse(
            "fields = [\"status\", \"header.x-a\"]\nsample = 0.5",
            "http",
            "[frontend.log]\nslow = \"200ms\"",
        )
        .unwrap();
        let p = &c.frontends[0].log;
        assert_eq!(p.layout, c.log.plan.layout, "the global line");
        assert_eq!(p.captures, c.log.plan.captures);
        assert_eq!((p.sample_ppm, p.slow), (500_000, Some(Duration::from_millis(200))));
        let c = parse(
            "sample = 0.5",
            "http",
            "[frontend.log]\nfields = [\"path\", \"cookie.s\"]\nsample = 1.0",
        )
        .unwrap();
        let p = &c.frontends[0].log;
        assert_eq!(p.sample_ppm, 1_000_000);
        assert_eq!(p.captures.len(), 1);
        let e = refused("", "http", "[frontend.log]\ntemplate = \"{status}\"");
        assert!(e.contains("frontend[0].log.template"), "{e}");
        let e = refused("", "http", "[frontend.log]\nfield = [\"status\"]");
        assert!(e.contains("field"), "{e}");
    }

    #[test]
    fn a_tcp_frontend_refuses_request_fields_of_its_own() {
        let e = refused(
            "",
            "tcp",
            "[frontend.log]\nfields = [\"client\", \"header.user-agent\"]",
        );
        assert!(e.contains("frontend[0].log") && e.contains("tcp-mode frontend"), "{e}");
        let e = refused("", "tcp", "[frontend.log]\nfields = [\"client\", \"path\"]");
        assert!(e.contains("`path`"), "{e}");
        let c = parse(
            "",
            "tcp",
            "[frontend.log]\nfields = [\"client\", \"sni\", \"tls_cipher\", \"total_ms\"]",
        )
        .unwrap();
        assert!(matches!(c.frontends[0].log.layout, Layout::Json(ref k) if k.len() == 4));
        // `[log]`'s line serves both modes: a TCP session's line shows request fields empty.
        assert!(parse("fields = [\"client\", \"path\"]", "tcp", "").is_ok());
    }

    #[test]
    fn errors_and_slow_streams_are_kept_whatever_the_sample() {
        let p = LogPlan {
            sample_ppm: 0,
            slow: Some(Duration::from_secs(1)),
            ..LogPlan::default()
        };
        let never = || -> u32 { panic!("no draw needed") };
        assert!(p.keeps(503, false, Duration::ZERO, never));
        assert!(p.keeps(404, false, Duration::ZERO, never));
        assert!(p.keeps(200, true, Duration::ZERO, never));
        assert!(p.keeps(200, false, Duration::from_secs(2), never));
        assert!(!p.keeps(200, false, Duration::from_millis(10), never));
        let half = LogPlan {
            sample_ppm: 500_000,
            ..LogPlan::default()
        };
        assert!(half.keeps(200, false, Duration::ZERO, || 499_999));
        assert!(!half.keeps(200, false, Duration::ZERO, || 500_000));
        assert!(
            LogPlan::default().keeps(200, false, Duration::ZERO, never),
            "no sample: every line"
        );
    }
}
