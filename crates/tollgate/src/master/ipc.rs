//! The master ↔ worker channel: one Unix socketpair per worker process, the worker's end
//! being its stdin. First the listening sockets travel with `SCM_RIGHTS`
//! (`tollgate_sys::fdpass::send_listeners`, each keyed `KEY fe=FRONTEND`), then
//! length-prefixed messages:
//!
//! ```text
//! frame := len: u32 LE | body (at most MAX_FRAME bytes)
//! body  := verb | verb "\n" payload
//! master → worker:  "config\n" PATH "\n" TEXT   (once, right after the sockets)
//!                   "stop"        soft stop: stop accepting, finish in-flight, exit
//!                   "hard-stop"   close everything, exit
//! worker → master:  "ready"       serving (accept loops running)
//!                   "draining"    after "stop": accept loops gone, in-flight sessions finishing
//!                   "failed\n" MESSAGE
//! ```
//!
//! End of stream means the peer is gone: a worker whose master vanished soft-stops; a master
//! that reads EOF from a worker reaps it.

use std::io::{self, Read, Write};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame either side accepts (a config file travels in one frame).
pub const MAX_FRAME: usize = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToWorker {
    Config { path: String, text: String },
    Stop,
    HardStop,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToMaster {
    Ready,
    /// Soft-stopping: no longer accepting (its listener duplicates are closed).
    Draining,
    Failed(String),
}

impl ToWorker {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ToWorker::Config { path, text } => format!("config\n{path}\n{text}").into_bytes(),
            ToWorker::Stop => b"stop".to_vec(),
            ToWorker::HardStop => b"hard-stop".to_vec(),
        }
    }

    pub fn decode(body: &[u8]) -> io::Result<ToWorker> {
        let text = std::str::from_utf8(body).map_err(|_| bad("message is not UTF-8"))?;
        let (verb, rest) = text.split_once('\n').unwrap_or((text, ""));
        match verb {
            "config" => {
                let (path, text) = rest.split_once('\n').unwrap_or((rest, ""));
                Ok(ToWorker::Config {
                    path: path.to_string(),
                    text: text.to_string(),
                })
            }
            "stop" => Ok(ToWorker::Stop),
            "hard-stop" => Ok(ToWorker::HardStop),
            _ => Err(bad("unknown message to worker")),
        }
    }
}

impl ToMaster {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ToMaster::Ready => b"ready".to_vec(),
            ToMaster::Draining => b"draining".to_vec(),
            ToMaster::Failed(msg) => format!("failed\n{msg}").into_bytes(),
        }
    }

    pub fn decode(body: &[u8]) -> io::Result<ToMaster> {
        let text = std::str::from_utf8(body).map_err(|_| bad("message is not UTF-8"))?;
        let (verb, rest) = text.split_once('\n').unwrap_or((text, ""));
        match verb {
            "ready" => Ok(ToMaster::Ready),
            "draining" => Ok(ToMaster::Draining),
            "failed" => Ok(ToMaster::Failed(rest.to_string())),
            _ => Err(bad("unknown message to master")),
        }
    }
}

fn bad(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn frame(body: &[u8]) -> io::Result<Vec<u8>> {
    if body.len() > MAX_FRAME {
        return Err(bad("frame too large"));
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    Ok(out)
}

fn body_len(header: [u8; 4]) -> io::Result<usize> {
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(bad("frame too large"));
    }
    Ok(len)
}

pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    w.write_all(&frame(body)?)?;
    w.flush()
}

/// One frame, or `None` at a clean end of stream (between frames).
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; 4];
    match r.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut body = vec![0u8; body_len(header)?];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

pub async fn write_frame_async(w: &mut (impl AsyncWrite + Unpin), body: &[u8]) -> io::Result<()> {
    w.write_all(&frame(body)?).await?;
    w.flush().await
}

/// One frame, or `None` at a clean end of stream (between frames). Cancel-safe only
/// between frames: callers keep one read in flight and do not drop it midway.
pub async fn read_frame_async(r: &mut (impl AsyncRead + Unpin)) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; 4];
    match r.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut body = vec![0u8; body_len(header)?];
    r.read_exact(&mut body).await?;
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn messages_round_trip() {
        let msgs = [
            ToWorker::Config {
                path: "/etc/t.toml".into(),
                text: "[global]\nworkers = 2\n".into(),
            },
            ToWorker::Stop,
            ToWorker::HardStop,
        ];
        let mut wire = Vec::new();
        for m in &msgs {
            write_frame(&mut wire, &m.encode()).unwrap();
        }
        let mut r = wire.as_slice();
        for m in &msgs {
            let body = read_frame(&mut r).unwrap().unwrap();
            assert_eq!(&ToWorker::decode(&body).unwrap(), m);
        }
        assert!(read_frame(&mut r).unwrap().is_none());
        for m in [
            ToMaster::Ready,
            ToMaster::Draining,
            ToMaster::Failed("bind: in use\nline 2".into()),
        ] {
            assert_eq!(ToMaster::decode(&m.encode()).unwrap(), m);
        }
        assert!(ToMaster::decode(b"bogus").is_err());
    }

    #[test]
    fn truncated_and_oversized_frames_are_errors() {
        let mut r: &[u8] = &[5, 0, 0, 0, b's'];
        assert!(read_frame(&mut r).is_err());
        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        let mut r: &[u8] = &huge;
        assert_eq!(read_frame(&mut r).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
