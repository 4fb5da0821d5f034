//! Body framing tracker: validates, delimits and re-frames a message body, sans-io.
//!
//! Owns: [`BodyTracker`], [`Progress`] and [`Reframed`]. [`BodyTracker::advance`] only says how
//! many of the bytes it is shown belong to the body and whether the body ended.
//! [`BodyTracker::reframe`] does the same and rewrites the bytes in place into the framing the
//! proxy forwards: for a chunked body every chunk-size line becomes canonical (`{hex}\r\n`:
//! lowercase, no leading zeros, no whitespace, no extensions); chunk data, the CRLF after it
//! and the trailer section (validated as today) are kept byte for byte. A peer behind the proxy
//! can then only read the framing the tracker decided. Neither method allocates.
//!
//! Chunk sizes are bounded by [`MAX_CHUNK_SIZE`] (2^52 - 1, as HAProxy: languages whose integers
//! are doubles cannot misread anything below it); leading zeros are accepted (the line length
//! bound, [`MAX_CHUNK_LINE`], still applies) and never forwarded. An optional decoded-size limit
//! ([`BodyTracker::with_max_body`]) refuses a chunked body as soon as a chunk-size line would
//! take it past the limit (413), before any of that chunk's data is forwarded.
//!
//! Invariants: the state only moves forward within a chunk (size line -> data -> CRLF -> next
//! size line, or trailers -> done); the result does not depend on how the input is split, since
//! all state lives in `self` (for `reframe`: the concatenation of every call's output is the
//! same); after `done`, both methods consume nothing. Chunked framing requires CRLF everywhere:
//! a bare LF is an error (as in HAProxy). A canonical size line is never longer than the line it
//! replaces, so `reframe` writes behind its read position; the one exception, a line that began
//! in an earlier call, is returned on the side ([`Reframed::lead`]).

use super::BodyFraming;
use super::error::{ErrorKind, H1Error, Side};
use super::headers::{is_field_value_byte, is_tchar};

/// Longest chunk-size line (size + extensions) we accept.
pub const MAX_CHUNK_LINE: usize = 4096;

/// Largest chunk size we accept: 2^52 - 1 (13 hex digits), HAProxy's bound.
pub const MAX_CHUNK_SIZE: u64 = (1 << 52) - 1;

/// Longest canonical chunk-size line: 13 hex digits and CRLF.
pub const MAX_SIZE_LINE: usize = 15;

/// Default limit for a trailer section (same as the default head limit).
pub const DEFAULT_TRAILER_LIMIT: usize = 32 * 1024;

/// Result of one [`BodyTracker::advance`] call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// How many bytes at the start of the input belong to this body (forward them). When `done`
    /// is false this is the whole input.
    pub consumed: usize,
    /// The body ended; bytes after `consumed` belong to the next message.
    pub done: bool,
}

/// Result of one [`BodyTracker::reframe`] call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reframed {
    /// How many bytes at the start of the input belong to this body, as [`Progress::consumed`].
    pub consumed: usize,
    /// The bytes to forward are `lead()` followed by `input[..out]` (`out <= consumed`).
    pub out: usize,
    /// The body ended.
    pub done: bool,
    lead: [u8; MAX_SIZE_LINE],
    lead_len: u8,
}

impl Reframed {
    /// A canonical size line to forward before `input[..out]`: only when that line began in an
    /// earlier call and there was no room for it in this call's input. Usually empty.
    pub fn lead(&self) -> &[u8] {
        self.lead.get(..usize::from(self.lead_len)).unwrap_or_default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Length {
        remaining: u64,
    },
    Close,
    /// Reading hex digits; `digits` so far.
    Size {
        size: u64,
        digits: u32,
    },
    /// Whitespace after the size: only `;` or CR may follow.
    SizeWs {
        size: u64,
    },
    /// In chunk extensions.
    Ext {
        size: u64,
        quoted: bool,
        escaped: bool,
    },
    /// Saw CR ending the size line.
    SizeLf {
        size: u64,
    },
    Data {
        remaining: u64,
    },
    DataCr,
    DataLf,
    TrailerStart,
    TrailerName,
    TrailerValue,
    TrailerLf,
    FinalLf,
    Done,
}

/// Tracks one message body. Create one per message from the head's [`BodyFraming`].
#[derive(Clone, Debug)]
pub struct BodyTracker {
    state: State,
    side: Side,
    line_len: usize,
    trailer_len: usize,
    trailer_limit: usize,
    /// The trailer field name being read, matched against `FORBIDDEN_TRAILERS`.
    trailer_name: NameMatch,
    /// Sum of the chunk sizes announced so far (chunked bodies).
    decoded: u64,
    max_body: u64,
}

impl BodyTracker {
    /// Tracker for a body of the given framing; `side` picks the error statuses (400 vs 502).
    pub fn new(framing: BodyFraming, side: Side) -> Self {
        let state = match framing {
            BodyFraming::None | BodyFraming::ContentLength(0) => State::Done,
            BodyFraming::ContentLength(n) => State::Length { remaining: n },
            BodyFraming::Chunked => State::Size { size: 0, digits: 0 },
            BodyFraming::CloseDelimited => State::Close,
        };
        BodyTracker {
            state,
            side,
            line_len: 0,
            trailer_len: 0,
            trailer_limit: DEFAULT_TRAILER_LIMIT,
            trailer_name: NameMatch::default(),
            decoded: 0,
            max_body: u64::MAX,
        }
    }

    /// Refuse a chunked body whose decoded size would exceed `limit` bytes
    /// ([`ErrorKind::BodyTooLarge`]), checked at each chunk-size line. A Content-Length body is
    /// judged from its head by the caller.
    pub fn with_max_body(mut self, limit: u64) -> Self {
        self.max_body = limit;
        self
    }

    /// Set the trailer section limit (default [`DEFAULT_TRAILER_LIMIT`]).
    pub fn with_trailer_limit(mut self, limit: usize) -> Self {
        self.trailer_limit = limit;
        self
    }

    /// The body has ended.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// What a Content-Length body still has to come; `None` for any other framing (and once
    /// done). The bytes may then be forwarded without being shown here (spliced), and
    /// counted with [`Self::skip_length`].
    pub fn length_left(&self) -> Option<u64> {
        match self.state {
            State::Length { remaining } => Some(remaining),
            _ => None,
        }
    }

    /// Counts `n` bytes of a Content-Length body as forwarded unseen (at most
    /// [`Self::length_left`]; more is taken as all of it). Other framings: nothing.
    pub fn skip_length(&mut self, n: u64) {
        if let State::Length { remaining } = self.state {
            let left = remaining.saturating_sub(n);
            self.state = if left == 0 {
                State::Done
            } else {
                State::Length { remaining: left }
            };
        }
    }

    /// Short state name for logs.
    pub fn as_str(&self) -> &'static str {
        match self.state {
            State::Length { .. } => "length",
            State::Close => "until-close",
            State::Size { .. } | State::SizeWs { .. } | State::Ext { .. } | State::SizeLf { .. } => "chunk-size",
            State::Data { .. } => "chunk-data",
            State::DataCr | State::DataLf => "chunk-crlf",
            State::TrailerStart | State::TrailerName | State::TrailerValue | State::TrailerLf => "trailers",
            State::FinalLf => "final-crlf",
            State::Done => "done",
        }
    }

    /// The peer closed the connection: fine for a close-delimited or finished body, else
    /// [`ErrorKind::TruncatedBody`].
    pub fn on_eof(&mut self) -> Result<(), H1Error> {
        match self.state {
            State::Done => Ok(()),
            State::Close => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(H1Error::new(ErrorKind::TruncatedBody, self.side)),
        }
    }

    /// Feed the next bytes of the connection; see [`Progress`]. Any split of the same bytes gives
    /// the same total.
    pub fn advance(&mut self, input: &[u8]) -> Result<Progress, H1Error> {
        self.step(input).map_err(|k| H1Error::new(k, self.side))
    }

    fn step(&mut self, input: &[u8]) -> Result<Progress, ErrorKind> {
        let mut i = 0usize;
        loop {
            match self.state {
                State::Done => {
                    return Ok(Progress {
                        consumed: i,
                        done: true,
                    });
                }
                State::Close => {
                    return Ok(Progress {
                        consumed: input.len(),
                        done: false,
                    });
                }
                State::Length { .. } | State::Data { .. } => {
                    let (take, more) = self.take_data(input.len().saturating_sub(i));
                    i += take;
                    if more {
                        return Ok(Progress {
                            consumed: i,
                            done: false,
                        });
                    }
                }
                _ => {
                    let Some(&b) = input.get(i) else {
                        return Ok(Progress {
                            consumed: i,
                            done: false,
                        });
                    };
                    i += 1;
                    self.byte(b)?;
                }
            }
        }
    }

    /// Like [`Self::advance`], and rewrites `input[..consumed]` in place into the framing to
    /// forward (see the module doc): forward [`Reframed::lead`] then `input[..out]`. Any split
    /// of the same bytes gives the same concatenated output. After an error the contents of
    /// `input` are unspecified.
    pub fn reframe(&mut self, input: &mut [u8]) -> Result<Reframed, H1Error> {
        let mut done = Reframed {
            consumed: 0,
            out: 0,
            done: false,
            lead: [0; MAX_SIZE_LINE],
            lead_len: 0,
        };
        self.reframe_into(input, &mut done)
            .map_err(|k| H1Error::new(k, self.side))?;
        Ok(done)
    }

    fn reframe_into(&mut self, input: &mut [u8], res: &mut Reframed) -> Result<(), ErrorKind> {
        // Read position `r`, write position `w`; `w <= r` throughout.
        let (mut r, mut w) = (0usize, 0usize);
        let len = input.len();
        loop {
            match self.state {
                State::Done => {
                    res.done = true;
                    break;
                }
                State::Close => {
                    input.copy_within(r..len, w);
                    w += len - r;
                    r = len;
                    break;
                }
                State::Length { .. } | State::Data { .. } => {
                    let (take, more) = self.take_data(len - r);
                    if w != r {
                        input.copy_within(r..r + take, w);
                    }
                    r += take;
                    w += take;
                    if more {
                        break;
                    }
                }
                before => {
                    let Some(&b) = input.get(r) else { break };
                    r += 1;
                    self.byte(b)?;
                    match before {
                        // The size line just ended (`byte` accepted its LF).
                        State::SizeLf { size } => {
                            let (line, n) = size_line(size);
                            let line = line.get(..n).unwrap_or_default();
                            match input.get_mut(w..w + n) {
                                Some(slot) if w + n <= r => {
                                    slot.copy_from_slice(line);
                                    w += n;
                                }
                                // Only a line begun in an earlier call (then `w == 0`).
                                _ => {
                                    debug_assert!(w == 0 && res.lead_len == 0);
                                    if let Some(lead) = res.lead.get_mut(..n) {
                                        lead.copy_from_slice(line);
                                    }
                                    res.lead_len = n as u8;
                                }
                            }
                        }
                        // Size digits, whitespace and extensions: replaced by the line above.
                        State::Size { .. } | State::SizeWs { .. } | State::Ext { .. } => {}
                        // CRLF after data, trailers, final CRLF: validated, kept as they are.
                        _ => {
                            if let Some(slot) = input.get_mut(w) {
                                *slot = b;
                            }
                            w += 1;
                        }
                    }
                }
            }
        }
        res.consumed = r;
        res.out = w;
        Ok(())
    }

    /// Takes up to `avail` bytes of body data (Length or Data state): (taken, more expected).
    /// Like [`Self::advance`], and moves the body's *content* to the front of `input`: the
    /// data of a chunked body without its size lines, CRLFs and trailers (validated all the
    /// same), for a peer that frames the body itself (HTTP/2 DATA frames). Forward
    /// `input[..out]` ([`Reframed::lead`] is always empty).
    pub fn decode(&mut self, input: &mut [u8]) -> Result<Reframed, H1Error> {
        let mut res = Reframed {
            consumed: 0,
            out: 0,
            done: false,
            lead: [0; MAX_SIZE_LINE],
            lead_len: 0,
        };
        let (consumed, out, done) = self.decode_into(input).map_err(|k| H1Error::new(k, self.side))?;
        (res.consumed, res.out, res.done) = (consumed, out, done);
        Ok(res)
    }

    /// `decode`'s loop: read position `r`, write position `w <= r`.
    fn decode_into(&mut self, input: &mut [u8]) -> Result<(usize, usize, bool), ErrorKind> {
        let (mut r, mut w) = (0usize, 0usize);
        let len = input.len();
        loop {
            match self.state {
                State::Done => return Ok((r, w, true)),
                State::Close => {
                    input.copy_within(r..len, w);
                    return Ok((len, w + len - r, false));
                }
                State::Length { .. } | State::Data { .. } => {
                    let (take, more) = self.take_data(len - r);
                    if w != r {
                        input.copy_within(r..r + take, w);
                    }
                    r += take;
                    w += take;
                    if more {
                        return Ok((r, w, false));
                    }
                }
                _ => {
                    let Some(&b) = input.get(r) else {
                        return Ok((r, w, false));
                    };
                    r += 1;
                    self.byte(b)?;
                }
            }
        }
    }

    fn take_data(&mut self, avail: usize) -> (usize, bool) {
        let (State::Length { remaining } | State::Data { remaining }) = self.state else {
            return (0, false);
        };
        let take = usize::try_from(remaining).map_or(avail, |r| r.min(avail));
        let left = remaining - take as u64;
        self.state = match (self.state, left) {
            (State::Length { .. }, 0) => State::Done,
            (State::Length { .. }, _) => State::Length { remaining: left },
            (_, 0) => State::DataCr,
            _ => State::Data { remaining: left },
        };
        (take, left != 0)
    }

    /// One byte of chunked framing outside chunk data.
    fn byte(&mut self, b: u8) -> Result<(), ErrorKind> {
        use ErrorKind::*;
        if matches!(
            self.state,
            State::Size { .. } | State::SizeWs { .. } | State::Ext { .. } | State::SizeLf { .. }
        ) {
            self.line_len += 1;
            if self.line_len > MAX_CHUNK_LINE {
                return Err(BadChunkExtension);
            }
        }
        if matches!(
            self.state,
            State::TrailerStart | State::TrailerName | State::TrailerValue | State::TrailerLf | State::FinalLf
        ) {
            self.trailer_len += 1;
            if self.trailer_len > self.trailer_limit {
                return Err(TrailersTooLarge);
            }
        }
        self.state = match self.state {
            State::Size { size, digits } => match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                    let d = (b as char).to_digit(16).map_or(0, u64::from);
                    let size = size * 16 + d;
                    if size > MAX_CHUNK_SIZE {
                        return Err(BadChunkSize);
                    }
                    State::Size {
                        size,
                        digits: digits.saturating_add(1),
                    }
                }
                _ if digits == 0 => return Err(BadChunkSize),
                b' ' | b'\t' => State::SizeWs { size },
                b';' => State::Ext {
                    size,
                    quoted: false,
                    escaped: false,
                },
                b'\r' => State::SizeLf { size },
                b'\n' => return Err(BareLf),
                _ => return Err(BadChunkSize),
            },
            State::SizeWs { size } => match b {
                b' ' | b'\t' => State::SizeWs { size },
                b';' => State::Ext {
                    size,
                    quoted: false,
                    escaped: false,
                },
                b'\r' => State::SizeLf { size },
                b'\n' => return Err(BareLf),
                _ => return Err(BadChunkSize),
            },
            State::Ext {
                size,
                quoted: true,
                escaped,
            } => match b {
                _ if escaped && is_field_value_byte(b) => State::Ext {
                    size,
                    quoted: true,
                    escaped: false,
                },
                b'\\' => State::Ext {
                    size,
                    quoted: true,
                    escaped: true,
                },
                b'"' => State::Ext {
                    size,
                    quoted: false,
                    escaped: false,
                },
                _ if is_field_value_byte(b) => State::Ext {
                    size,
                    quoted: true,
                    escaped: false,
                },
                _ => return Err(BadChunkExtension),
            },
            State::Ext {
                size, quoted: false, ..
            } => match b {
                b'\r' => State::SizeLf { size },
                b'\n' => return Err(BareLf),
                b'"' => State::Ext {
                    size,
                    quoted: true,
                    escaped: false,
                },
                b';' | b'=' | b' ' | b'\t' => State::Ext {
                    size,
                    quoted: false,
                    escaped: false,
                },
                _ if is_tchar(b) => State::Ext {
                    size,
                    quoted: false,
                    escaped: false,
                },
                _ => return Err(BadChunkExtension),
            },
            State::SizeLf { size } => match b {
                b'\n' => {
                    self.line_len = 0;
                    if size > self.max_body.saturating_sub(self.decoded) {
                        return Err(BodyTooLarge);
                    }
                    self.decoded += size;
                    if size == 0 {
                        State::TrailerStart
                    } else {
                        State::Data { remaining: size }
                    }
                }
                _ => return Err(BadChunkSize),
            },
            State::DataCr => match b {
                b'\r' => State::DataLf,
                b'\n' => return Err(BareLf),
                _ => return Err(MissingChunkCrlf),
            },
            State::DataLf => match b {
                b'\n' => State::Size { size: 0, digits: 0 },
                _ => return Err(MissingChunkCrlf),
            },
            State::TrailerStart => match b {
                b'\r' => State::FinalLf,
                b'\n' => return Err(BareLf),
                b' ' | b'\t' => return Err(ObsFold),
                _ if is_tchar(b) => {
                    self.trailer_name = NameMatch::default();
                    self.trailer_name.push(b);
                    State::TrailerName
                }
                _ => return Err(BadTrailer),
            },
            State::TrailerName => match b {
                b':' if self.trailer_name.is_forbidden() => return Err(ForbiddenTrailer),
                b':' => State::TrailerValue,
                _ if is_tchar(b) => {
                    self.trailer_name.push(b);
                    State::TrailerName
                }
                _ => return Err(BadTrailer),
            },
            State::TrailerValue => match b {
                b'\r' => State::TrailerLf,
                b'\n' => return Err(BareLf),
                _ if is_field_value_byte(b) => State::TrailerValue,
                _ => return Err(BadTrailer),
            },
            State::TrailerLf => match b {
                b'\n' => State::TrailerStart,
                _ => return Err(BadTrailer),
            },
            State::FinalLf => match b {
                b'\n' => State::Done,
                _ => return Err(BadTrailer),
            },
            // Handled in `step`.
            s @ (State::Length { .. } | State::Close | State::Data { .. } | State::Done) => s,
        };
        Ok(())
    }
}

/// Trailer fields refused wherever they appear (RFC 9110 6.5.1: a trailer must not carry what
/// frames or routes the message).
const FORBIDDEN_TRAILERS: [&[u8]; 3] = [b"transfer-encoding", b"content-length", b"host"];

/// Matches a field name, byte by byte, against `FORBIDDEN_TRAILERS` (case-insensitive) with
/// no buffer: one bit per name still matching.
#[derive(Clone, Copy, Debug, Default)]
struct NameMatch {
    len: usize,
    /// Bit `i` clear: the name differs from `FORBIDDEN_TRAILERS[i]`.
    mismatch: u8,
}

impl NameMatch {
    fn push(&mut self, b: u8) {
        for (i, name) in FORBIDDEN_TRAILERS.iter().enumerate() {
            if name.get(self.len).is_none_or(|&c| c != b.to_ascii_lowercase()) {
                self.mismatch |= 1 << i;
            }
        }
        self.len += 1;
    }

    fn is_forbidden(&self) -> bool {
        FORBIDDEN_TRAILERS
            .iter()
            .enumerate()
            .any(|(i, name)| self.mismatch & (1 << i) == 0 && name.len() == self.len)
    }
}

/// The canonical chunk-size line for `size` (at most [`MAX_CHUNK_SIZE`]): lowercase hex without
/// leading zeros, then CRLF. Returns the bytes and how many of them are used.
fn size_line(size: u64) -> ([u8; MAX_SIZE_LINE], usize) {
    let mut line = [0u8; MAX_SIZE_LINE];
    let digits = (((64 - size.leading_zeros()) as usize).div_ceil(4)).clamp(1, MAX_SIZE_LINE - 2);
    for (i, slot) in line.iter_mut().take(digits).enumerate() {
        let nibble = (size >> (4 * (digits - 1 - i))) & 0xf;
        *slot = b"0123456789abcdef".get(nibble as usize).copied().unwrap_or(b'0');
    }
    if let Some(crlf) = line.get_mut(digits..digits + 2) {
        crlf.copy_from_slice(b"\r\n");
    }
    (line, digits + 2)
}
