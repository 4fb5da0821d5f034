//! Frames: `len: u32 LE | body`, the body one JSON message of at most `MAX_FRAME` bytes.
//! Blocking and async readers and writers for both ends. Decoding never panics: a frame
//! that is too large, not UTF-8 JSON, or not a known message is an `InvalidData` error
//! saying what was wrong.

use std::io::{self, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Request, VERSION};

/// Largest frame either side accepts (a config file travels in one frame).
pub(crate) const MAX_FRAME: usize = 16 << 20;

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

pub(crate) fn encode<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let body = serde_json::to_vec(msg).map_err(|e| bad(format!("encode: {e}")))?;
    if body.len() > MAX_FRAME {
        return Err(bad("frame too large"));
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

pub(crate) fn decode<T: DeserializeOwned>(body: &[u8]) -> io::Result<T> {
    serde_json::from_slice(body).map_err(|e| bad(format!("malformed message: {e}")))
}

/// A client request, its version checked.
pub(crate) fn decode_request(body: &[u8]) -> io::Result<Request> {
    // The version first, so a newer client gets "version" rather than a schema error.
    #[derive(serde::Deserialize)]
    struct Versioned {
        v: u32,
    }
    let versioned: Versioned = decode(body)?;
    if versioned.v != VERSION {
        return Err(bad(format!(
            "protocol version {} not spoken here (this build speaks {VERSION})",
            versioned.v
        )));
    }
    decode(body)
}

/// The stream ended after `got` bytes of a frame header: cleanly between frames, or with a
/// truncated header (an error that says so, not a silent end).
fn end_of_stream(got: usize) -> io::Result<Option<Vec<u8>>> {
    if got == 0 {
        Ok(None)
    } else {
        Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("truncated frame: the stream ended after {got} of the 4 header bytes"),
        ))
    }
}

fn truncated(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        io::Error::new(e.kind(), "truncated frame: the stream ended inside the body")
    } else {
        e
    }
}

fn body_len(header: [u8; 4]) -> io::Result<usize> {
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(bad(format!("frame of {len} bytes is over the {MAX_FRAME}-byte limit")));
    }
    Ok(len)
}

pub fn write<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    w.write_all(&encode(msg)?)?;
    w.flush()
}

/// One frame's body, or `None` at a clean end of stream (between frames).
pub(crate) fn read_body(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < header.len() {
        match r.read(header.get_mut(got..).unwrap_or_default()) {
            Ok(0) => return end_of_stream(got),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let mut body = vec![0u8; body_len(header)?];
    r.read_exact(&mut body).map_err(truncated)?;
    Ok(Some(body))
}

pub fn read<T: DeserializeOwned>(r: &mut impl Read) -> io::Result<Option<T>> {
    read_body(r)?.map(|b| decode(&b)).transpose()
}

pub(crate) async fn write_async<T: Serialize>(w: &mut (impl AsyncWrite + Unpin), msg: &T) -> io::Result<()> {
    w.write_all(&encode(msg)?).await?;
    w.flush().await
}

/// One frame's body, or `None` at a clean end of stream. Cancel-safe only between frames:
/// callers keep one read in flight and do not drop it midway.
pub(crate) async fn read_body_async(r: &mut (impl AsyncRead + Unpin)) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < header.len() {
        match r.read(header.get_mut(got..).unwrap_or_default()).await? {
            0 => return end_of_stream(got),
            n => got += n,
        }
    }
    let mut body = vec![0u8; body_len(header)?];
    r.read_exact(&mut body).await.map_err(truncated)?;
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::command::{Command, Reply, ServerChange, ToMaster, ToWorker};
    use crate::live::server::AdminState;
    use proptest::prelude::*;

    /// Any JSON value, two levels deep.
    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            any::<u32>().prop_map(|n| serde_json::json!(n)),
            "[ -~]{0,24}".prop_map(serde_json::Value::String),
            Just(serde_json::json!("127.0.0.1:80")),
        ];
        leaf.prop_recursive(2, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn messages_round_trip() {
        let msgs = [
            ToWorker::Config {
                path: "/etc/t.toml".into(),
                text: "[global]\nworkers = 2\n".into(),
                ids: Default::default(),
                changes: vec![ServerChange {
                    backend: "app".into(),
                    server: "a".into(),
                    state: Some(AdminState::Drain),
                    weight: Some(3),
                    ..Default::default()
                }],
                disabled_frontends: vec!["web".into()],
                health: vec![crate::command::HealthReport {
                    backend: "app".into(),
                    server: "a".into(),
                    oper: crate::live::server::OperState::Down,
                    agent_percent: 50,
                }],
                certs: vec![crate::command::CertInstall {
                    frontend: "web".into(),
                    cert_path: "/etc/tls/a.pem".into(),
                    key_path: "/etc/tls/a.key".into(),
                    cert_pem: "-----BEGIN CERTIFICATE-----\n".into(),
                    key_pem: "-----BEGIN PRIVATE KEY-----\n".into(),
                    ocsp_hex: Some("3003".into()),
                }],
                tickets: crate::config::tickets::current(),
                quic_key: Some([9; 16]),
            },
            ToWorker::HandOver,
            ToWorker::Stop,
            ToWorker::HardStop,
            ToWorker::ShowServers { id: 7, backend: None },
        ];
        let mut wire = Vec::new();
        for m in &msgs {
            write(&mut wire, m).unwrap();
        }
        let mut r = wire.as_slice();
        for m in &msgs {
            assert_eq!(&read::<ToWorker>(&mut r).unwrap().unwrap(), m);
        }
        assert!(read::<ToWorker>(&mut r).unwrap().is_none());
        // Additive: a config message from an older master (no `health`) still reads.
        let old = br#"{"type":"config","path":"p","text":"t"}"#;
        assert!(matches!(decode::<ToWorker>(old).unwrap(), ToWorker::Config { health, .. } if health.is_empty()));
        for m in [
            ToMaster::Ready,
            ToMaster::Draining,
            ToMaster::Failed {
                message: "bind: in use\nline 2".into(),
            },
            ToMaster::Reply(Reply::text(3, "done")),
            ToMaster::Reply(Reply::error(4, "no such server")),
            ToMaster::Health(crate::command::HealthReport {
                backend: "app".into(),
                server: "b".into(),
                oper: crate::live::server::OperState::Up,
                agent_percent: 100,
            }),
        ] {
            assert_eq!(decode::<ToMaster>(&serde_json::to_vec(&m).unwrap()).unwrap(), m);
        }
    }

    #[test]
    fn requests_are_checked_and_explained() {
        let ok = br#"{"v":1,"id":9,"command":{"type":"set_server_weight","backend":"app","server":"a","weight":4}}"#;
        let req = decode_request(ok).unwrap();
        assert_eq!(req.id, 9);
        assert!(matches!(req.command, Command::SetServerWeight { weight: 4, .. }));
        let err = |body: &[u8]| decode_request(body).unwrap_err().to_string();
        assert!(err(br#"{"v":1,"id":1,"command":{"type":"explode"}}"#).contains("unknown variant `explode`"));
        assert!(err(br#"{"v":2,"id":1,"command":{"type":"status"}}"#).contains("version 2"));
        assert!(
            err(br#"{"v":1,"id":1,"command":{"type":"set_server_weight","backend":"app"}}"#).contains("missing field")
        );
        assert!(
            err(br#"{"v":1,"id":1,"command":{"type":"set_server_state","backend":"a","server":"b","state":"sleepy"}}"#)
                .contains("unknown variant `sleepy`")
        );
        assert!(err(b"reload\n").contains("malformed"));
        // Additive schema: an unknown field in the envelope is ignored.
        assert!(decode_request(br#"{"v":1,"id":1,"later":true,"command":{"type":"status"}}"#).is_ok());
    }

    #[test]
    fn truncated_and_oversized_frames_are_errors() {
        let mut r: &[u8] = &[5, 0, 0, 0, b's'];
        assert!(read_body(&mut r).unwrap_err().to_string().contains("truncated"));
        let mut r: &[u8] = &[5, 0];
        assert!(
            read_body(&mut r)
                .unwrap_err()
                .to_string()
                .contains("2 of the 4 header bytes")
        );
        let mut r: &[u8] = &[];
        assert!(read_body(&mut r).unwrap().is_none(), "a clean end between frames");
        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        let mut r: &[u8] = &huge;
        assert_eq!(read_body(&mut r).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_request(&bytes);
            let _ = decode::<ToWorker>(&bytes);
            let _ = decode::<ToMaster>(&bytes);
            let wire = frame(&bytes);
            let mut r = wire.as_slice();
            let _ = read::<Request>(&mut r);
            let mut raw = bytes.as_slice();
            let _ = read::<Request>(&mut raw);
        }

        /// Requests shaped like real ones — a known or made-up command type, made-up fields
        /// with any JSON values, any version — are decoded into a request that encodes back
        /// to itself, or refused with a message; never a panic.
        #[test]
        fn plausible_requests_are_decoded_or_refused(
            ty in prop_oneof![
                Just("add_server".to_string()),
                Just("del_server".to_string()),
                Just("set_server_address".to_string()),
                Just("set_server_state".to_string()),
                Just("show_servers".to_string()),
                Just("status".to_string()),
                "[a-z_]{0,16}",
            ],
            fields in proptest::collection::btree_map(
                prop_oneof![
                    Just("backend".to_string()),
                    Just("server".to_string()),
                    Just("address".to_string()),
                    Just("spec".to_string()),
                    Just("state".to_string()),
                    "[a-z_]{1,8}",
                ],
                json_value(),
                0..6,
            ),
            v in prop_oneof![Just(1u32), any::<u32>()],
        ) {
            let mut command: serde_json::Map<String, serde_json::Value> = fields.into_iter().collect();
            command.insert("type".into(), serde_json::Value::String(ty));
            let body = serde_json::json!({"v": v, "id": 1, "command": command});
            match decode_request(&serde_json::to_vec(&body).unwrap()) {
                Ok(req) => {
                    prop_assert_eq!(v, VERSION);
                    let again = decode_request(&serde_json::to_vec(&req).unwrap()).unwrap();
                    prop_assert_eq!(again, req);
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn mutated_requests_never_panic(pos in 0usize..200, byte in any::<u8>()) {
            let mut body = br#"{"v":1,"id":5,"command":{"type":"set_server_state","backend":"app","server":"a","state":"maint","kill":true}}"#.to_vec();
            if let Some(b) = body.get_mut(pos) {
                *b = byte;
            }
            let _ = decode_request(&body);
        }
    }
}
