//! Body framing tracker: validates and delimits a message body, sans-io.
//!
//! Owns: [`BodyTracker`] and [`Progress`]. The proxy forwards body bytes verbatim (chunk-size
//! lines, extensions and trailers included); the tracker only says how many of the bytes it is
//! shown belong to the body and whether the body ended. It never copies or allocates.
//!
//! Invariants: the state only moves forward within a chunk (size line -> data -> CRLF -> next
//! size line, or trailers -> done); the result does not depend on how the input is split, since
//! all state lives in `self`; after `done`, `advance` consumes nothing. Chunked framing requires
//! CRLF everywhere: a bare LF is an error (as in HAProxy).

use super::BodyFraming;
use super::error::{ErrorKind, H1Error, Side};
use super::headers::{is_field_value_byte, is_tchar};

/// Longest chunk-size line (size + extensions) we accept.
pub const MAX_CHUNK_LINE: usize = 4096;

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
        }
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
                State::Length { remaining } | State::Data { remaining } => {
                    let avail = input.len().saturating_sub(i);
                    let take = usize::try_from(remaining).map_or(avail, |r| r.min(avail));
                    i += take;
                    let left = remaining - take as u64;
                    self.state = match (self.state, left) {
                        (State::Length { .. }, 0) => State::Done,
                        (State::Length { .. }, _) => State::Length { remaining: left },
                        (_, 0) => State::DataCr,
                        _ => State::Data { remaining: left },
                    };
                    if left != 0 {
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
                    let size = size
                        .checked_mul(16)
                        .and_then(|s| s.checked_add(d))
                        .ok_or(BadChunkSize)?;
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
                _ if is_tchar(b) => State::TrailerName,
                _ => return Err(BadTrailer),
            },
            State::TrailerName => match b {
                b':' => State::TrailerValue,
                _ if is_tchar(b) => State::TrailerName,
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
