#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::future::poll_fn;
use std::sync::Arc;

use proptest::prelude::*;
use rustls::crypto::cipher::{AeadKey, InboundOpaqueMessage, Iv, OutboundChunks, OutboundPlainMessage};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, ContentType, ServerConfig, ServerConnection, SupportedCipherSuite};

use super::*;

// ----- record framing ------------------------------------------------------------------

fn record(len: usize) -> Vec<u8> {
    let mut r = vec![23, 3, 3];
    r.extend_from_slice(&(len as u16).to_be_bytes());
    r.resize(5 + len, 0xab);
    r
}

#[test]
fn framing_whole_records_and_headers() {
    let mut f = RecordFraming::default();
    assert!(f.at_boundary());
    assert_eq!(f.until_boundary(), 5);
    let r = record(10);
    f.feed(&r[..3]);
    assert!(!f.at_boundary());
    assert_eq!(f.until_boundary(), 2);
    f.feed(&r[3..5]);
    assert!(!f.at_boundary());
    assert_eq!(f.until_boundary(), 10);
    f.feed(&r[5..12]);
    assert_eq!(f.until_boundary(), 3);
    f.feed(&r[12..]);
    assert!(f.at_boundary());
    // An empty record is whole once its header is.
    f.feed(&record(0));
    assert!(f.at_boundary());
    // Two records and a bit in one go.
    let mut two = record(3);
    two.extend(record(16384));
    two.extend(&record(1)[..4]);
    f.feed(&two);
    assert!(!f.at_boundary());
    assert_eq!(f.until_boundary(), 1);
}

proptest! {
    /// However the stream is cut, the tracker is at a boundary exactly at record ends, and
    /// `until_boundary` never overshoots the end of the current record.
    #[test]
    fn framing_any_split(lens in prop::collection::vec(0usize..300, 1..8), cuts in prop::collection::vec(1usize..64, 1..200)) {
        let mut stream = Vec::new();
        let mut ends = std::collections::BTreeSet::new();
        for l in &lens {
            stream.extend(record(*l));
            ends.insert(stream.len());
        }
        let mut f = RecordFraming::default();
        let mut pos = 0;
        let mut cut = cuts.iter().cycle();
        while pos < stream.len() {
            let n = (*cut.next().unwrap()).min(stream.len() - pos).min(f.until_boundary().max(1));
            // A corked reader takes at most until_boundary(): it must never cross an end.
            let next_end = *ends.range(pos + 1..).next().unwrap();
            prop_assert!(pos + f.until_boundary() <= next_end);
            f.feed(&stream[pos..pos + n]);
            pos += n;
            prop_assert_eq!(f.at_boundary(), ends.contains(&pos));
        }
    }
}

// ----- handover decision -----------------------------------------------------------------

fn safe() -> Readiness {
    Readiness {
        at_boundary: true,
        supported: true,
        ..Readiness::default()
    }
}

#[test]
fn decision_table() {
    let h = Handover::Pending { after_bytes: 100 };
    assert_eq!(h.decide(99, &safe()), Decision::NotDue);
    assert_eq!(h.decide(100, &safe()), Decision::Go);
    assert_eq!(Handover::Pending { after_bytes: 0 }.decide(0, &safe()), Decision::Go);
    for wait in [
        Readiness {
            at_boundary: false,
            ..safe()
        },
        Readiness {
            wants_write: true,
            ..safe()
        },
        Readiness {
            plaintext_pending: true,
            ..safe()
        },
        Readiness {
            handshaking: true,
            ..safe()
        },
    ] {
        assert_eq!(h.decide(1000, &wait), Decision::Wait, "{wait:?}");
    }
    for refuse in [
        Readiness {
            peer_closed: true,
            ..safe()
        },
        Readiness {
            write_closed: true,
            ..safe()
        },
        Readiness {
            supported: false,
            ..safe()
        },
        // Refusal wins over waiting: it is final either way.
        Readiness {
            peer_closed: true,
            wants_write: true,
            ..safe()
        },
    ] {
        assert_eq!(h.decide(1000, &refuse), Decision::Refuse, "{refuse:?}");
    }
    assert_eq!(Handover::Installed.decide(1000, &safe()), Decision::NotDue);
    assert_eq!(Handover::Refused.decide(1000, &safe()), Decision::NotDue);
}

// ----- key mapping ---------------------------------------------------------------------

const NONCE: [u8; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];

#[test]
fn mapping_tls13_aes_gcm_splits_the_nonce() {
    for (cipher, key_len) in [(KtlsCipher::Aes128Gcm, 16), (KtlsCipher::Aes256Gcm, 32)] {
        let key = vec![7u8; key_len];
        let k = KernelKeys::new(TlsVersion::Tls13, cipher, &key, &NONCE, 0x0102).unwrap();
        let s = k.secrets();
        assert_eq!(s.key, &key[..]);
        assert_eq!(s.salt, &NONCE[..4]);
        assert_eq!(s.iv, &NONCE[4..]);
        assert_eq!(s.rec_seq, &[0, 0, 0, 0, 0, 0, 1, 2]);
        let (kl, il, sl, rl) = cipher.lengths();
        assert_eq!(
            (s.key.len(), s.iv.len(), s.salt.len(), s.rec_seq.len()),
            (kl, il, sl, rl)
        );
    }
}

#[test]
fn mapping_tls12_aes_gcm_counts_explicit_nonces_from_the_sequence_number() {
    let k = KernelKeys::new(TlsVersion::Tls12, KtlsCipher::Aes256Gcm, &[9; 32], &NONCE, 5).unwrap();
    let s = k.secrets();
    assert_eq!(s.salt, &NONCE[..4]);
    assert_eq!(s.iv, &5u64.to_be_bytes());
    assert_eq!(s.rec_seq, &5u64.to_be_bytes());
}

#[test]
fn mapping_chacha_takes_the_whole_nonce() {
    for v in [TlsVersion::Tls12, TlsVersion::Tls13] {
        let k = KernelKeys::new(v, KtlsCipher::Chacha20Poly1305, &[1; 32], &NONCE, 9).unwrap();
        let s = k.secrets();
        assert_eq!(s.iv, &NONCE);
        assert!(s.salt.is_empty());
        assert_eq!(s.rec_seq, &9u64.to_be_bytes());
    }
}

#[test]
fn mapping_rejects_wrong_key_lengths() {
    assert!(KernelKeys::new(TlsVersion::Tls13, KtlsCipher::Aes128Gcm, &[0; 32], &NONCE, 0).is_none());
    assert!(KernelKeys::new(TlsVersion::Tls13, KtlsCipher::Aes256Gcm, &[0; 16], &NONCE, 0).is_none());
    assert_eq!(
        kernel_cipher(CipherSuite::TLS13_AES_128_GCM_SHA256),
        Some(KtlsCipher::Aes128Gcm)
    );
    assert_eq!(
        kernel_cipher(CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
        Some(KtlsCipher::Chacha20Poly1305)
    );
    assert_eq!(kernel_cipher(CipherSuite::TLS_RSA_WITH_AES_128_CBC_SHA), None);
    assert_eq!(kernel_version(ProtocolVersion::TLSv1_1), None);
}

// ----- the mapping against real rustls connections, with the kernel's record layer emulated

struct Pair {
    client: ClientConnection,
    server: ServerConnection,
}

fn cert() -> (
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["a.example".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    (
        cert.der().clone(),
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
}

fn configs(
    suite: CipherSuite,
    version: &'static rustls::SupportedProtocolVersion,
) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites.retain(|s| s.suite() == suite);
    let provider = Arc::new(provider);
    let (cert, key) = cert();
    let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    server.enable_secret_extraction = true;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

fn transfer(from: &mut dyn FnMut(&mut Vec<u8>), to: &mut dyn FnMut(&[u8])) {
    let mut buf = Vec::new();
    from(&mut buf);
    if !buf.is_empty() {
        to(&buf);
    }
}

impl Pair {
    fn new(suite: CipherSuite, version: &'static rustls::SupportedProtocolVersion) -> Pair {
        let (sc, cc) = configs(suite, version);
        let mut p = Pair {
            client: ClientConnection::new(cc, ServerName::try_from("a.example").unwrap()).unwrap(),
            server: ServerConnection::new(sc).unwrap(),
        };
        for _ in 0..10 {
            p.client_to_server();
            p.server_to_client();
        }
        assert!(!p.client.is_handshaking() && !p.server.is_handshaking());
        p
    }

    fn client_to_server(&mut self) {
        let (c, s) = (&mut self.client, &mut self.server);
        transfer(
            &mut |b| {
                while c.wants_write() {
                    c.write_tls(b).unwrap();
                }
            },
            &mut |b| {
                s.read_tls(&mut &b[..]).unwrap();
                s.process_new_packets().unwrap();
            },
        );
    }

    fn server_to_client(&mut self) {
        let (c, s) = (&mut self.client, &mut self.server);
        transfer(
            &mut |b| {
                while s.wants_write() {
                    s.write_tls(b).unwrap();
                }
            },
            &mut |b| {
                c.read_tls(&mut &b[..]).unwrap();
                c.process_new_packets().unwrap();
            },
        );
    }
}

/// One record as the kernel would build it with `keys` (TX): the `n`-th record after the
/// handover.
fn kernel_seal(suite: SupportedCipherSuite, keys: &KernelKeys, key: AeadKey, payloads: &[&[u8]]) -> Vec<u8> {
    let s = keys.secrets();
    let seq0 = u64::from_be_bytes(s.rec_seq.try_into().unwrap());
    let mut wire = Vec::new();
    match (suite, keys.cipher) {
        (SupportedCipherSuite::Tls13(t), _) => {
            // nonce = salt ‖ iv, then XOR seq into the last 8 bytes: rustls' own rule.
            let mut base = [0u8; 12];
            if keys.cipher == KtlsCipher::Chacha20Poly1305 {
                base.copy_from_slice(s.iv);
            } else {
                base[..4].copy_from_slice(s.salt);
                base[4..].copy_from_slice(s.iv);
            }
            let mut enc = t.aead_alg.encrypter(key, Iv::from(base));
            for (j, p) in payloads.iter().enumerate() {
                let m = OutboundPlainMessage {
                    typ: ContentType::ApplicationData,
                    version: ProtocolVersion::TLSv1_2,
                    payload: OutboundChunks::Single(p),
                };
                wire.extend(enc.encrypt(m, seq0 + j as u64).unwrap().encode());
            }
        }
        (SupportedCipherSuite::Tls12(t), KtlsCipher::Chacha20Poly1305) => {
            let mut enc = t.aead_alg.encrypter(key, s.iv, &[]);
            for (j, p) in payloads.iter().enumerate() {
                let m = OutboundPlainMessage {
                    typ: ContentType::ApplicationData,
                    version: ProtocolVersion::TLSv1_2,
                    payload: OutboundChunks::Single(p),
                };
                wire.extend(enc.encrypt(m, seq0 + j as u64).unwrap().encode());
            }
        }
        (SupportedCipherSuite::Tls12(t), _) => {
            // The kernel: explicit nonce starts at `iv` and counts up; AAD carries the
            // sequence number. rustls' encrypter makes `extra ⊕ seq`, so `extra` must be the
            // same for every record for one encrypter to emulate it (it is 0 here).
            let iv = u64::from_be_bytes(s.iv.try_into().unwrap());
            let extras: Vec<u64> = (0..payloads.len() as u64).map(|j| (iv + j) ^ (seq0 + j)).collect();
            assert!(
                extras.iter().all(|e| *e == extras[0]),
                "explicit nonce must track the sequence"
            );
            let mut enc = t.aead_alg.encrypter(key, s.salt, &extras[0].to_be_bytes());
            for (j, p) in payloads.iter().enumerate() {
                let m = OutboundPlainMessage {
                    typ: ContentType::ApplicationData,
                    version: ProtocolVersion::TLSv1_2,
                    payload: OutboundChunks::Single(p),
                };
                let rec = enc.encrypt(m, seq0 + j as u64).unwrap().encode();
                assert_eq!(
                    &rec[5..13],
                    &(iv + j as u64).to_be_bytes(),
                    "explicit nonce on the wire"
                );
                wire.extend(rec);
            }
        }
    }
    wire
}

/// Decrypts records as the kernel would with `keys` (RX).
fn kernel_open(suite: SupportedCipherSuite, keys: &KernelKeys, key: AeadKey, wire: &[u8]) -> Vec<Vec<u8>> {
    let s = keys.secrets();
    let seq0 = u64::from_be_bytes(s.rec_seq.try_into().unwrap());
    let mut dec = match (suite, keys.cipher) {
        (SupportedCipherSuite::Tls13(t), c) => {
            let mut base = [0u8; 12];
            if c == KtlsCipher::Chacha20Poly1305 {
                base.copy_from_slice(s.iv);
            } else {
                base[..4].copy_from_slice(s.salt);
                base[4..].copy_from_slice(s.iv);
            }
            t.aead_alg.decrypter(key, Iv::from(base))
        }
        (SupportedCipherSuite::Tls12(t), KtlsCipher::Chacha20Poly1305) => t.aead_alg.decrypter(key, s.iv),
        // TLS 1.2 AES-GCM: only the salt; the explicit nonce is in each record.
        (SupportedCipherSuite::Tls12(t), _) => t.aead_alg.decrypter(key, s.salt),
    };
    let mut out = Vec::new();
    let mut rest = wire.to_vec();
    let mut seq = seq0;
    while !rest.is_empty() {
        let len = u16::from_be_bytes([rest[3], rest[4]]) as usize;
        let mut body: Vec<u8> = rest[5..5 + len].to_vec();
        let typ = ContentType::from(rest[0]);
        let m = InboundOpaqueMessage::new(typ, ProtocolVersion::TLSv1_2, &mut body);
        let plain = dec.decrypt(m, seq).expect("kernel-side decrypt with the mapped keys");
        out.push(plain.payload.to_vec());
        rest.drain(..5 + len);
        seq += 1;
    }
    out
}

fn mapping_round_trip(suite: CipherSuite, version: &'static rustls::SupportedProtocolVersion) {
    let mut p = Pair::new(suite, version);
    // Some traffic in userspace first, so the sequence numbers are not at their start.
    for i in 0..3u8 {
        p.server.writer().write_all(&[i; 100]).unwrap();
        p.server_to_client();
        p.client.writer().write_all(&[i; 50]).unwrap();
        p.client_to_server();
    }
    let mut sink = vec![0u8; 1000];
    while p.client.reader().read(&mut sink).is_ok_and(|n| n > 0) {}
    while p.server.reader().read(&mut sink).is_ok_and(|n| n > 0) {}
    let negotiated = p.server.negotiated_cipher_suite().unwrap();
    let kversion = kernel_version(p.server.protocol_version().unwrap()).unwrap();
    assert!(!p.server.wants_write());
    let secrets = p.server.dangerous_extract_secrets().unwrap();
    let (tx_seq, tx) = secrets.tx;
    let (rx_seq, rx) = secrets.rx;
    assert!(tx_seq >= 3 && rx_seq >= 3, "tx {tx_seq} rx {rx_seq}");
    let tx_keys = KernelKeys::from_rustls(kversion, tx_seq, &tx).unwrap();
    let rx_keys = KernelKeys::from_rustls(kversion, rx_seq, &rx).unwrap();
    assert_eq!(Some(tx_keys.cipher), kernel_cipher(suite));
    let take_key = |s: ConnectionTrafficSecrets| match s {
        ConnectionTrafficSecrets::Aes128Gcm { key, .. }
        | ConnectionTrafficSecrets::Aes256Gcm { key, .. }
        | ConnectionTrafficSecrets::Chacha20Poly1305 { key, .. } => key,
        _ => unreachable!(),
    };
    // TX: records sealed the kernel's way must read fine in the rustls client.
    let wire = kernel_seal(
        negotiated,
        &tx_keys,
        take_key(tx),
        &[b"kernel one", b"kernel two", b"three"],
    );
    p.client.read_tls(&mut &wire[..]).unwrap();
    p.client
        .process_new_packets()
        .expect("client accepts kernel-sealed records");
    let mut got = vec![0u8; 100];
    let n = p.client.reader().read(&mut got).unwrap();
    let mut all = got[..n].to_vec();
    while let Ok(n) = p.client.reader().read(&mut got) {
        if n == 0 {
            break;
        }
        all.extend_from_slice(&got[..n]);
    }
    assert_eq!(all, b"kernel onekernel twothree");
    // RX: what the client sends next opens with the kernel's RX keys.
    p.client.writer().write_all(b"to the kernel").unwrap();
    let mut wire = Vec::new();
    while p.client.wants_write() {
        p.client.write_tls(&mut wire).unwrap();
    }
    let opened = kernel_open(negotiated, &rx_keys, take_key(rx), &wire);
    assert_eq!(opened.concat(), b"to the kernel");
}

#[test]
fn mapping_matches_rustls_tls13_aes128() {
    mapping_round_trip(CipherSuite::TLS13_AES_128_GCM_SHA256, &rustls::version::TLS13);
}

#[test]
fn mapping_matches_rustls_tls13_aes256() {
    mapping_round_trip(CipherSuite::TLS13_AES_256_GCM_SHA384, &rustls::version::TLS13);
}

#[test]
fn mapping_matches_rustls_tls13_chacha() {
    mapping_round_trip(CipherSuite::TLS13_CHACHA20_POLY1305_SHA256, &rustls::version::TLS13);
}

#[test]
fn mapping_matches_rustls_tls12_aes128() {
    mapping_round_trip(
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        &rustls::version::TLS12,
    );
}

#[test]
fn mapping_matches_rustls_tls12_aes256() {
    mapping_round_trip(
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        &rustls::version::TLS12,
    );
}

#[test]
fn mapping_matches_rustls_tls12_chacha() {
    mapping_round_trip(
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        &rustls::version::TLS12,
    );
}

// ----- KtlsClient over a real socket -------------------------------------------------------

/// Drives the endpoint over loopback: below `after_bytes` nothing happens; past it, at a
/// record boundary, the handover runs. Here (no ULP) it must fail *after* the keys left
/// rustls, be counted and end the connection with an error; on a kTLS kernel it must install
/// and the rest of the stream must come out of the kernel intact.
#[tokio::test]
async fn endpoint_hands_over_at_a_record_boundary() {
    use tokio::io::AsyncWriteExt;
    let (sc, cc) = configs(CipherSuite::TLS13_AES_128_GCM_SHA256, &rustls::version::TLS13);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let client = tokio::spawn(async move {
        let mut go_rx = Some(go_rx);
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(cc)
            .connect(ServerName::try_from("a.example").unwrap(), tcp)
            .await
            .unwrap();
        // Small records: 20 before the threshold's moment, the rest after the server saw
        // them (so the rest is what the kernel, if any, must decrypt).
        for i in 0..64u32 {
            if i == 20 {
                let _ = tls.flush().await;
                if go_rx.take().unwrap().await.is_err() {
                    return;
                }
            }
            if tls.write_all(&[(i % 251) as u8; 100]).await.is_err() || tls.flush().await.is_err() {
                return;
            }
        }
        let _ = tls.shutdown().await;
    });
    let (tcp, _) = listener.accept().await.unwrap();
    let tls = tokio_rustls::TlsAcceptor::from(sc)
        .accept(CorkStream::new(tcp))
        .await
        .unwrap();
    let stats = WorkerStats::default();
    let mut ep = KtlsClient::new(tls, 1000, &stats);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut go = Some(go_tx);
    let result = loop {
        if got.len() >= 2000
            && let Some(go) = go.take()
        {
            let _ = go.send(());
        }
        match poll_fn(|cx| ep.poll_read(cx, &mut buf)).await {
            Ok(0) => break Ok(()),
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.len() < 1000 {
                    assert_eq!(ep.handover(), Handover::Pending { after_bytes: 1000 });
                }
            }
            Err(e) => match ep.read_failed(e) {
                Ok(()) => break Ok(()),
                Err(e) => break Err(e),
            },
        }
    };
    let _ = client.await;
    match crate::tls::ktls::available() {
        Err(_) => {
            let e = result.unwrap_err();
            assert!(e.to_string().contains("TCP_ULP"), "{e}");
            assert_eq!(stats.ktls_install_failures.get(), 1);
            assert_eq!(stats.ktls_offloaded.get(), 0);
            assert_eq!(got.len(), 2000, "all of the userspace part, then the handover");
            // What was delivered is an exact prefix: nothing lost or duplicated before the
            // (loud) failure.
            let want: Vec<u8> = (0..64u32).flat_map(|i| [(i % 251) as u8; 100]).collect();
            assert_eq!(got[..], want[..got.len()]);
        }
        Ok(()) => {
            result.unwrap();
            assert_eq!(stats.ktls_offloaded.get(), 1);
            assert_eq!(ep.handover(), Handover::Installed);
            let want: Vec<u8> = (0..64u32).flat_map(|i| [(i % 251) as u8; 100]).collect();
            assert_eq!(got, want);
        }
    }
}

use std::io::Write;
