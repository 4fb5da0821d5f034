//! The origin's own HTTP/1.1 request framing: an independent, strict reading of RFC 9112
//! (httparse for the head, our own body and chunked decoder), never tollgate's codec.
//!
//! It answers one question per origin connection: which messages (method, target, decoded
//! body) do these bytes frame, and is anything left that frames as no message. Strict on
//! purpose: a byte a proxy forwards that a careful server could read two ways shows up here as
//! a difference (an `Invalid` tail) rather than being smoothed over.

/// One framed request as the origin read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Msg {
    pub method: String,
    pub target: String,
    pub body: Vec<u8>,
}

/// What followed the last complete message on a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tail {
    /// Nothing: every byte belonged to a message.
    Clean,
    /// A message began but the connection ended first (a request head with part of its body).
    Incomplete,
    /// Bytes that frame as no message; the reason names the first rule they broke.
    Invalid(&'static str),
}

/// One step of reading a buffer.
pub enum Step {
    Complete(Msg, usize),
    Partial,
    Invalid(&'static str),
}

/// Frames everything one connection carried.
pub fn frame(mut bytes: &[u8]) -> (Vec<Msg>, Tail) {
    let mut msgs = Vec::new();
    loop {
        if bytes.is_empty() {
            return (msgs, Tail::Clean);
        }
        match parse_one(bytes) {
            Step::Complete(m, used) => {
                msgs.push(m);
                bytes = bytes.get(used..).unwrap_or_default();
            }
            Step::Partial => return (msgs, Tail::Incomplete),
            Step::Invalid(why) => return (msgs, Tail::Invalid(why)),
        }
    }
}

/// Reads one request from the front of `buf`.
pub fn parse_one(buf: &[u8]) -> Step {
    if matches!(buf.first(), Some(b'\r' | b'\n')) {
        return Step::Invalid("empty line before a request");
    }
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Step::Partial,
        Err(_) => return Step::Invalid("request head"),
    };
    let head = &buf[..head_len];
    if !crlf_only(head) {
        return Step::Invalid("bare CR or LF in head");
    }
    let framing = match body_framing(req.headers) {
        Ok(f) => f,
        Err(why) => return Step::Invalid(why),
    };
    let rest = &buf[head_len..];
    let (body, used) = match framing {
        Framing::Length(n) => match rest.get(..n) {
            Some(b) => (b.to_vec(), n),
            None => return Step::Partial,
        },
        Framing::Chunked => match dechunk(rest) {
            Step2::Done(b, used) => (b, used),
            Step2::Partial => return Step::Partial,
            Step2::Invalid(why) => return Step::Invalid(why),
        },
    };
    let msg = Msg {
        method: req.method.unwrap_or_default().to_string(),
        target: req.path.unwrap_or_default().to_string(),
        body,
    };
    Step::Complete(msg, head_len + used)
}

enum Framing {
    Length(usize),
    Chunked,
}

/// RFC 9112 §6: Transfer-Encoding (final coding `chunked`, applied once, no Content-Length
/// beside it) or one Content-Length (identical repeats allowed, §6.3 item 5) or no body.
fn body_framing(headers: &[httparse::Header<'_>]) -> Result<Framing, &'static str> {
    let mut codings: Vec<String> = Vec::new();
    let mut length: Option<u64> = None;
    let mut saw_te = false;
    for h in headers {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            saw_te = true;
            let v = std::str::from_utf8(h.value).map_err(|_| "transfer-encoding not ascii")?;
            codings.extend(v.split(',').map(|c| c.trim_matches([' ', '\t']).to_ascii_lowercase()));
        } else if h.name.eq_ignore_ascii_case("content-length") {
            for part in h.value.split(|&b| b == b',') {
                let n = decimal(trim(part)).ok_or("content-length value")?;
                if length.is_some_and(|l| l != n) {
                    return Err("content-length values differ");
                }
                length = Some(n);
            }
        }
    }
    if saw_te {
        if length.is_some() {
            return Err("transfer-encoding with content-length");
        }
        codings.retain(|c| !c.is_empty());
        if codings.last().map(String::as_str) != Some("chunked") {
            return Err("final coding not chunked");
        }
        if codings.iter().filter(|c| *c == "chunked").count() > 1 {
            return Err("chunked twice");
        }
        if !codings.iter().all(|c| c.bytes().all(is_tchar)) {
            return Err("transfer coding not a token");
        }
        return Ok(Framing::Chunked);
    }
    let n = usize::try_from(length.unwrap_or(0)).map_err(|_| "content-length too large")?;
    Ok(Framing::Length(n))
}

enum Step2 {
    Done(Vec<u8>, usize),
    Partial,
    Invalid(&'static str),
}

/// A chunked body: `1*16HEXDIG [chunk-ext] CRLF data CRLF` … `0 [chunk-ext] CRLF trailers CRLF`.
fn dechunk(buf: &[u8]) -> Step2 {
    let mut body = Vec::new();
    let mut at = 0usize;
    loop {
        let rest = &buf[at..];
        let Some(eol) = rest.iter().position(|&b| b == b'\n') else {
            return if rest.len() > 4096 {
                Step2::Invalid("chunk size line too long")
            } else {
                Step2::Partial
            };
        };
        let Some(line) = rest[..eol].strip_suffix(b"\r") else {
            return Step2::Invalid("chunk size line without CR");
        };
        let size = match chunk_size(line) {
            Ok(s) => s,
            Err(why) => return Step2::Invalid(why),
        };
        at += eol + 1;
        if size == 0 {
            return match trailers(&buf[at..]) {
                Step2::Done(_, used) => Step2::Done(body, at + used),
                other => other,
            };
        }
        let Ok(size) = usize::try_from(size) else {
            return Step2::Partial;
        };
        let Some(end) = at.checked_add(size) else {
            return Step2::Partial;
        };
        let Some(data) = buf.get(at..end) else {
            return Step2::Partial;
        };
        body.extend_from_slice(data);
        match buf.get(end..end + 2) {
            None if buf.len() < end + 2 && b"\r\n".starts_with(&buf[end..]) => return Step2::Partial,
            Some(b"\r\n") => at = end + 2,
            _ => return Step2::Invalid("chunk data not followed by CRLF"),
        }
    }
}

/// `chunk-size [ chunk-ext ]` where chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] ).
fn chunk_size(line: &[u8]) -> Result<u64, &'static str> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err("chunk size not hex");
    }
    if digits > 16 {
        return Err("chunk size over 16 hex digits");
    }
    let hex = std::str::from_utf8(&line[..digits]).map_err(|_| "chunk size not hex")?;
    let size = u64::from_str_radix(hex, 16).map_err(|_| "chunk size not hex")?;
    chunk_ext(&line[digits..])?;
    Ok(size)
}

fn chunk_ext(mut s: &[u8]) -> Result<(), &'static str> {
    while !s.is_empty() {
        // Whitespace is allowed only before a `;` (BWS), never alone at the end of the line.
        let t = skip_ws(s);
        let Some(after) = t.strip_prefix(b";") else {
            return Err(if t.is_empty() {
                "whitespace after chunk size"
            } else {
                "chunk size followed by junk"
            });
        };
        s = skip_ws(after);
        let name = s.iter().take_while(|&&b| is_tchar(b)).count();
        if name == 0 {
            return Err("chunk ext name");
        }
        s = &s[name..];
        let t = skip_ws(s);
        if let Some(after) = t.strip_prefix(b"=") {
            s = ext_value(skip_ws(after))?;
        }
    }
    Ok(())
}

fn ext_value(s: &[u8]) -> Result<&[u8], &'static str> {
    if let Some(mut q) = s.strip_prefix(b"\"") {
        loop {
            match q.split_first() {
                None => return Err("chunk ext quoted string"),
                Some((b'"', rest)) => return Ok(rest),
                Some((b'\\', rest)) => {
                    let Some((c, rest)) = rest.split_first() else {
                        return Err("chunk ext quoted string");
                    };
                    if !(*c == b'\t' || (0x20..0x7f).contains(c) || *c >= 0x80) {
                        return Err("chunk ext quoted pair");
                    }
                    q = rest;
                }
                Some((c, rest)) if *c == b'\t' || (0x20..0x7f).contains(c) || *c >= 0x80 => q = rest,
                Some(_) => return Err("chunk ext quoted string"),
            }
        }
    }
    let n = s.iter().take_while(|&&b| is_tchar(b)).count();
    if n == 0 {
        return Err("chunk ext value");
    }
    Ok(&s[n..])
}

fn trailers(buf: &[u8]) -> Step2 {
    if buf.starts_with(b"\r\n") {
        return Step2::Done(Vec::new(), 2);
    }
    if buf.is_empty() || buf == b"\r" {
        return Step2::Partial;
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    match httparse::parse_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete((n, _))) if crlf_only(&buf[..n]) => Step2::Done(Vec::new(), n),
        Ok(httparse::Status::Complete(_)) => Step2::Invalid("bare CR or LF in trailers"),
        Ok(httparse::Status::Partial) => Step2::Partial,
        Err(_) => Step2::Invalid("trailer section"),
    }
}

/// Every LF is preceded by CR and every CR followed by LF.
fn crlf_only(s: &[u8]) -> bool {
    s.iter().enumerate().all(|(i, &b)| match b {
        b'\n' => i > 0 && s[i - 1] == b'\r',
        b'\r' => s.get(i + 1) == Some(&b'\n'),
        _ => true,
    })
}

fn skip_ws(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    &s[n..]
}

fn trim(s: &[u8]) -> &[u8] {
    let s = skip_ws(s);
    let n = s.iter().rev().take_while(|&&b| b == b' ' || b == b'\t').count();
    &s[..s.len() - n]
}

fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 18 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
