//! Socket options socket2 lacks: `TCP_ULP` and the kernel-TLS (kTLS) key install.
//!
//! Owns: the `#[repr(C)]` mirrors of `struct tls12_crypto_info_*` from the Linux uapi header
//! `linux/tls.h`, filling them from byte slices (lengths checked before any system call),
//! the two `setsockopt` calls, the startup probe [`probe_ktls`], and sending/receiving
//! non-data TLS records on a kTLS socket ([`send_tls_alert_close_notify`], [`recv_tls_record`]).
//!
//! kTLS is optional and off by default. Decide once at startup with [`probe_ktls`], *before*
//! any handshake: after a handshake's secrets have been extracted there is no way back if the
//! ULP then fails. The order on a connected TCP socket is `set_tcp_ulp(fd, "tls")`, then
//! [`set_ktls_crypto`] for `Tx` and/or `Rx`.
//!
//! Key material is copied into a stack struct for the call and overwritten afterwards (best
//! effort: the compiler is told the zeroed value is observed, but copies made by the kernel
//! or elsewhere are out of reach).

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// `SOL_TLS` from `linux/socket.h`.
const SOL_TLS: libc::c_int = 282;
/// `TCP_ULP` from `linux/tcp.h`.
const TCP_ULP: libc::c_int = 31;
/// `TLS_TX` / `TLS_RX` from `linux/tls.h`.
const TLS_TX: libc::c_int = 1;
const TLS_RX: libc::c_int = 2;
const TLS_1_2_VERSION: u16 = 0x0303;
const TLS_1_3_VERSION: u16 = 0x0304;
const TLS_CIPHER_AES_GCM_128: u16 = 51;
const TLS_CIPHER_AES_GCM_256: u16 = 52;
const TLS_CIPHER_CHACHA20_POLY1305: u16 = 54;
/// `TCP_ULP_NAME_MAX` from `net/tcp.h`.
const TCP_ULP_NAME_MAX: usize = 16;

/// `struct tls_crypto_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct TlsCryptoInfo {
    version: u16,
    cipher_type: u16,
}

/// `struct tls12_crypto_info_aes_gcm_128` (also used for TLS 1.3).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Tls12CryptoInfoAesGcm128 {
    info: TlsCryptoInfo,
    iv: [u8; 8],
    key: [u8; 16],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

/// `struct tls12_crypto_info_aes_gcm_256`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Tls12CryptoInfoAesGcm256 {
    info: TlsCryptoInfo,
    iv: [u8; 8],
    key: [u8; 32],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

/// `struct tls12_crypto_info_chacha20_poly1305` (its `salt` has size 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Tls12CryptoInfoChacha20Poly1305 {
    info: TlsCryptoInfo,
    iv: [u8; 12],
    key: [u8; 32],
    salt: [u8; 0],
    rec_seq: [u8; 8],
}

/// Protocol version of the connection whose keys are installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// Which half of the connection the keys are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KtlsDirection {
    /// `TLS_TX`: the kernel encrypts what we write.
    Tx,
    /// `TLS_RX`: the kernel decrypts what we read.
    Rx,
}

/// The AEADs the kernel offers that tollgate uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KtlsCipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

impl KtlsCipher {
    /// Required lengths of `(key, iv, salt, rec_seq)` in [`KtlsSecrets`].
    ///
    /// For AES-GCM the 12-byte nonce base is split as `salt` (first 4 bytes) and `iv` (last 8;
    /// in TLS 1.2 that is the explicit nonce of the next record); ChaCha20-Poly1305 takes the
    /// whole 12 bytes as `iv` and an empty `salt`. `rec_seq` is the big-endian sequence number
    /// of the next record.
    pub const fn lengths(self) -> (usize, usize, usize, usize) {
        match self {
            KtlsCipher::Aes128Gcm => (16, 8, 4, 8),
            KtlsCipher::Aes256Gcm => (32, 8, 4, 8),
            KtlsCipher::Chacha20Poly1305 => (32, 12, 0, 8),
        }
    }
}

/// Traffic secrets for one direction, as byte slices; lengths per [`KtlsCipher::lengths`].
#[derive(Clone, Copy)]
pub struct KtlsSecrets<'a> {
    pub key: &'a [u8],
    pub iv: &'a [u8],
    pub salt: &'a [u8],
    pub rec_seq: &'a [u8],
}

impl std::fmt::Debug for KtlsSecrets<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KtlsSecrets { .. }")
    }
}

/// Plain-old-data structs that may be handed to `setsockopt` as raw bytes.
///
/// Implemented only for the `#[repr(C)]`, padding-free structs above.
trait SockoptValue: Copy + Default {}
impl SockoptValue for Tls12CryptoInfoAesGcm128 {}
impl SockoptValue for Tls12CryptoInfoAesGcm256 {}
impl SockoptValue for Tls12CryptoInfoChacha20Poly1305 {}

fn setsockopt_bytes(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, value: &[u8]) -> io::Result<()> {
    let len = libc::socklen_t::try_from(value.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "option value too long"))?;
    // SAFETY: `fd` is a live descriptor for the duration of the borrow; `value` points to
    // `len` initialised bytes that stay borrowed for the whole call, and the kernel only reads
    // them.
    let rc = unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, value.as_ptr().cast(), len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn setsockopt_struct<T: SockoptValue>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    let len = libc::socklen_t::try_from(std::mem::size_of::<T>())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "option value too long"))?;
    // SAFETY: `T` is one of the padding-free `#[repr(C)]` uapi structs (sealed by the private
    // `SockoptValue` trait), so all `size_of::<T>()` bytes behind the reference are
    // initialised; the reference outlives the call and the kernel only reads through it.
    let rc = unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, std::ptr::from_ref(value).cast(), len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches the upper-layer protocol `name` (e.g. `"tls"`) to a *connected* TCP socket.
pub fn set_tcp_ulp(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() >= TCP_ULP_NAME_MAX || name.contains('\0') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad TCP ULP name"));
    }
    setsockopt_bytes(fd, libc::IPPROTO_TCP, TCP_ULP, name.as_bytes())
}

/// Installs kTLS keys for one direction (`setsockopt(SOL_TLS, TLS_TX | TLS_RX, crypto_info)`).
///
/// The socket must already carry the `tls` ULP ([`set_tcp_ulp`]). Slice lengths are checked
/// first ([`KtlsCipher::lengths`]); a mismatch is `InvalidInput` with no system call made.
pub fn set_ktls_crypto(
    fd: BorrowedFd<'_>,
    direction: KtlsDirection,
    version: TlsVersion,
    cipher: KtlsCipher,
    secrets: &KtlsSecrets<'_>,
) -> io::Result<()> {
    let name = match direction {
        KtlsDirection::Tx => TLS_TX,
        KtlsDirection::Rx => TLS_RX,
    };
    let version = match version {
        TlsVersion::Tls12 => TLS_1_2_VERSION,
        TlsVersion::Tls13 => TLS_1_3_VERSION,
    };
    match cipher {
        KtlsCipher::Aes128Gcm => {
            let mut v = Tls12CryptoInfoAesGcm128 {
                info: TlsCryptoInfo {
                    version,
                    cipher_type: TLS_CIPHER_AES_GCM_128,
                },
                ..Default::default()
            };
            fill(&mut v.key, &mut v.iv, &mut v.salt, &mut v.rec_seq, secrets)?;
            install(fd, name, &mut v)
        }
        KtlsCipher::Aes256Gcm => {
            let mut v = Tls12CryptoInfoAesGcm256 {
                info: TlsCryptoInfo {
                    version,
                    cipher_type: TLS_CIPHER_AES_GCM_256,
                },
                ..Default::default()
            };
            fill(&mut v.key, &mut v.iv, &mut v.salt, &mut v.rec_seq, secrets)?;
            install(fd, name, &mut v)
        }
        KtlsCipher::Chacha20Poly1305 => {
            let mut v = Tls12CryptoInfoChacha20Poly1305 {
                info: TlsCryptoInfo {
                    version,
                    cipher_type: TLS_CIPHER_CHACHA20_POLY1305,
                },
                ..Default::default()
            };
            fill(&mut v.key, &mut v.iv, &mut v.salt, &mut v.rec_seq, secrets)?;
            install(fd, name, &mut v)
        }
    }
}

fn fill(key: &mut [u8], iv: &mut [u8], salt: &mut [u8], rec_seq: &mut [u8], s: &KtlsSecrets<'_>) -> io::Result<()> {
    for (dst, src, what) in [
        (key, s.key, "kTLS key has the wrong length for the cipher"),
        (iv, s.iv, "kTLS iv has the wrong length for the cipher"),
        (salt, s.salt, "kTLS salt has the wrong length for the cipher"),
        (rec_seq, s.rec_seq, "kTLS rec_seq has the wrong length for the cipher"),
    ] {
        if dst.len() != src.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        }
        dst.copy_from_slice(src);
    }
    Ok(())
}

fn install<T: SockoptValue>(fd: BorrowedFd<'_>, name: libc::c_int, v: &mut T) -> io::Result<()> {
    let result = setsockopt_struct(fd, SOL_TLS, name, v);
    *v = T::default();
    std::hint::black_box(v);
    result
}

/// `TLS_SET_RECORD_TYPE` / `TLS_GET_RECORD_TYPE` (cmsg types at level `SOL_TLS`, `linux/tls.h`).
const TLS_SET_RECORD_TYPE: libc::c_int = 1;
const TLS_GET_RECORD_TYPE: libc::c_int = 2;
/// TLS record content types (RFC 8446 §5.1).
pub const TLS_RECORD_ALERT: u8 = 21;
pub const TLS_RECORD_HANDSHAKE: u8 = 22;
pub const TLS_RECORD_APPLICATION_DATA: u8 = 23;
/// The payload of a `close_notify` alert: level warning (1), description close_notify (0).
pub const CLOSE_NOTIFY_ALERT: [u8; 2] = [1, 0];

/// One control message carrying a one-byte TLS record type: `CMSG_SPACE(1)` bytes, laid out
/// as `struct cmsghdr` followed by the (padded) data byte, as `CMSG_DATA` expects.
#[repr(C)]
#[derive(Clone, Copy)]
struct RecordTypeCmsg {
    hdr: libc::cmsghdr,
    data: [u8; 8],
}

impl RecordTypeCmsg {
    fn zeroed() -> Self {
        // SAFETY: `cmsghdr` is a plain C struct of integers (and, on some targets, integer
        // padding fields); the all-zero bit pattern is a valid value for every field.
        let hdr: libc::cmsghdr = unsafe { std::mem::zeroed() };
        RecordTypeCmsg { hdr, data: [0; 8] }
    }

    /// `cmsg_len` for one data byte (`CMSG_LEN(1)`).
    fn len_for_one_byte() -> usize {
        // SAFETY: `CMSG_LEN` is pure arithmetic on its argument (no pointer is involved).
        unsafe { libc::CMSG_LEN(1) as usize }
    }

    /// The `SOL_TLS` / `TLS_SET_RECORD_TYPE` message that makes the kernel send the payload of
    /// the same `sendmsg` as one record of `record_type`.
    fn set_record_type(record_type: u8) -> Self {
        let mut c = Self::zeroed();
        c.hdr.cmsg_len = Self::len_for_one_byte() as _;
        c.hdr.cmsg_level = SOL_TLS;
        c.hdr.cmsg_type = TLS_SET_RECORD_TYPE;
        c.data[0] = record_type;
        c
    }

    /// The record type the kernel reported with `recvmsg`, if this buffer holds one.
    fn record_type(&self, controllen: usize) -> Option<u8> {
        (controllen >= Self::len_for_one_byte()
            && self.hdr.cmsg_level == SOL_TLS
            && self.hdr.cmsg_type == TLS_GET_RECORD_TYPE)
            .then_some(self.data[0])
    }
}

/// Sends `payload` as one TLS record of type `record_type` through a kTLS socket
/// (`sendmsg` with a `SOL_TLS` / `TLS_SET_RECORD_TYPE` control message). Non-blocking
/// (`MSG_DONTWAIT`, `MSG_NOSIGNAL`): `WouldBlock` means wait for writability and call again.
/// Returns the bytes sent (all of `payload`, or an error).
///
/// On a TCP socket *without* the `tls` ULP the kernel ignores the control message and the
/// payload goes out as plain bytes (used by the tests).
pub fn send_tls_record(fd: BorrowedFd<'_>, record_type: u8, payload: &[u8]) -> io::Result<usize> {
    let mut cmsg = RecordTypeCmsg::set_record_type(record_type);
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: `msghdr` is a plain C struct of integers and pointers; all-zero (null pointers,
    // zero lengths) is a valid value, and the fields used are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = std::ptr::from_mut(&mut cmsg).cast();
    msg.msg_controllen = std::mem::size_of::<RecordTypeCmsg>() as _;
    loop {
        // SAFETY: `fd` is live for the borrow; `msg` points to one iovec over `payload` (only
        // read by the kernel) and to `cmsg`, a correctly sized and aligned control buffer
        // (`CMSG_SPACE(1)` bytes, `cmsghdr` first); all of them outlive the call.
        let rc = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let sent = rc as usize;
        if sent != payload.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "TLS record sent in part"));
        }
        return Ok(sent);
    }
}

/// Sends a `close_notify` alert through a kTLS socket (TX keys installed): the kernel
/// encrypts `[1, 0]` as an alert record. `WouldBlock`: wait for writability and retry.
pub fn send_tls_alert_close_notify(fd: BorrowedFd<'_>) -> io::Result<()> {
    send_tls_record(fd, TLS_RECORD_ALERT, &CLOSE_NOTIFY_ALERT).map(|_| ())
}

/// Receives one record's payload from a kTLS socket (RX keys installed) together with its
/// record type (`recvmsg` with room for the `TLS_GET_RECORD_TYPE` control message). This is
/// how a non-application-data record (alert, TLS 1.3 KeyUpdate, ...) is read after a plain
/// `recv` failed on it with `EIO`. Non-blocking. `None` when the kernel attached no record
/// type (a socket without kTLS RX).
pub fn recv_tls_record(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(Option<u8>, usize)> {
    let mut cmsg = RecordTypeCmsg::zeroed();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as in `send_tls_record`: all-zero is a valid `msghdr`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = std::ptr::from_mut(&mut cmsg).cast();
    msg.msg_controllen = std::mem::size_of::<RecordTypeCmsg>() as _;
    loop {
        // SAFETY: `fd` is live for the borrow; the iovec covers `buf` (exclusively borrowed,
        // `buf.len()` writable bytes) and the control buffer is `cmsg` (`CMSG_SPACE(1)` bytes,
        // aligned for `cmsghdr`); the kernel writes at most those lengths, and every bit
        // pattern is valid for `u8` and for the integer fields of `cmsghdr`.
        let rc = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let got = rc as usize;
        let record_type = if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            None
        } else {
            cmsg.record_type(msg.msg_controllen as usize)
        };
        return Ok((record_type, got));
    }
}

/// Checks once whether this kernel can do kTLS: attaches the `tls` ULP to a throwaway
/// loopback TCP connection on 127.0.0.1 (port 0). `Err` carries a human-readable reason.
pub fn probe_ktls() -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("kTLS probe: bind 127.0.0.1:0: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("kTLS probe: local_addr: {e}"))?;
    let client = TcpStream::connect(addr).map_err(|e| format!("kTLS probe: connect {addr}: {e}"))?;
    let (_server, _) = listener.accept().map_err(|e| format!("kTLS probe: accept: {e}"))?;
    set_tcp_ulp(client.as_fd(), "tls").map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => format!(
            "kernel TLS unavailable: TCP_ULP \"tls\" not registered \
             (CONFIG_TLS not set or module tls not loadable): {e}"
        ),
        _ => format!("kernel TLS unavailable: setsockopt(TCP_ULP, \"tls\"): {e}"),
    })
}

/// [`probe_ktls`] as a yes/no.
pub fn tcp_ulp_tls_available() -> bool {
    probe_ktls().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[test]
    fn struct_layouts_match_the_uapi_header() {
        assert_eq!(size_of::<TlsCryptoInfo>(), 4);
        assert_eq!(size_of::<Tls12CryptoInfoAesGcm128>(), 40);
        assert_eq!(size_of::<Tls12CryptoInfoAesGcm256>(), 56);
        assert_eq!(size_of::<Tls12CryptoInfoChacha20Poly1305>(), 56);
        assert_eq!(std::mem::offset_of!(Tls12CryptoInfoAesGcm128, key), 12);
        assert_eq!(std::mem::offset_of!(Tls12CryptoInfoAesGcm256, rec_seq), 48);
        assert_eq!(std::mem::offset_of!(Tls12CryptoInfoChacha20Poly1305, rec_seq), 48);
    }

    /// This kernel (the development machines) has no `tls` ULP: the probe must say so with a
    /// reason, without panicking. On a kTLS-capable kernel it must simply succeed.
    #[test]
    fn probe_reports_a_reason() {
        match probe_ktls() {
            Ok(()) => assert!(tcp_ulp_tls_available()),
            Err(reason) => {
                assert!(reason.starts_with("kernel TLS unavailable"), "{reason}");
                assert!(!tcp_ulp_tls_available());
            }
        }
    }

    #[test]
    fn wrong_lengths_are_rejected_before_any_syscall() {
        let (client, _server) = tcp_pair();
        let secrets = KtlsSecrets {
            key: &[0; 16],
            iv: &[0; 12],
            salt: &[0; 4],
            rec_seq: &[0; 8],
        };
        let err = set_ktls_crypto(
            client.as_fd(),
            KtlsDirection::Tx,
            TlsVersion::Tls13,
            KtlsCipher::Aes128Gcm,
            &secrets,
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            set_tcp_ulp(client.as_fd(), "a-name-far-too-long").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn record_type_cmsg_is_laid_out_as_the_kernel_reads_it() {
        // SAFETY: `CMSG_SPACE` is pure arithmetic.
        let space = unsafe { libc::CMSG_SPACE(1) } as usize;
        assert_eq!(size_of::<RecordTypeCmsg>(), space);
        let c = RecordTypeCmsg::set_record_type(TLS_RECORD_ALERT);
        assert_eq!(c.hdr.cmsg_level, 282);
        assert_eq!(c.hdr.cmsg_type, 1);
        assert_eq!(c.hdr.cmsg_len, RecordTypeCmsg::len_for_one_byte() as _);
        // Walk it the way the kernel and libc do: first header at the start of the control
        // buffer, data right after the aligned header.
        let mut copy = c;
        // SAFETY: all-zero is a valid msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = std::ptr::from_mut(&mut copy).cast();
        msg.msg_controllen = space as _;
        // SAFETY: `msg` describes `copy`, a live control buffer of `space` bytes holding one
        // well-formed cmsghdr; CMSG_FIRSTHDR/CMSG_DATA only compute addresses inside it.
        let (level, ty, data) = unsafe {
            let h = libc::CMSG_FIRSTHDR(&msg);
            assert!(!h.is_null());
            ((*h).cmsg_level, (*h).cmsg_type, *libc::CMSG_DATA(h))
        };
        assert_eq!((level, ty, data), (282, 1, 21));
        assert_eq!(c.record_type(space), None, "SET is not GET");
        let mut got = RecordTypeCmsg::set_record_type(TLS_RECORD_HANDSHAKE);
        got.hdr.cmsg_type = TLS_GET_RECORD_TYPE;
        assert_eq!(got.record_type(space), Some(22));
        assert_eq!(got.record_type(0), None);
    }

    /// Without the ULP, TCP ignores the SOL_TLS control message, so the call itself and the
    /// payload can be checked on any kernel: the peer receives exactly `[1, 0]`.
    #[test]
    fn close_notify_sendmsg_and_record_recvmsg_on_plain_tcp() {
        use std::io::Read;
        let (client, mut server) = tcp_pair();
        send_tls_alert_close_notify(client.as_fd()).unwrap();
        let mut got = [0u8; 2];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got, CLOSE_NOTIFY_ALERT);
        // recvmsg with room for a record type: no kTLS RX, so no type, just the bytes.
        send_tls_record(client.as_fd(), TLS_RECORD_APPLICATION_DATA, b"hello").unwrap();
        server.set_nonblocking(false).unwrap();
        let mut buf = [0u8; 16];
        let mut total = 0;
        while total < 5 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            match recv_tls_record(server.as_fd(), &mut buf[total..]) {
                Ok((ty, n)) => {
                    assert_eq!(ty, None);
                    total += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(&buf[..5], b"hello");
    }

    #[test]
    fn install_keys_all_ciphers() {
        if let Err(reason) = probe_ktls() {
            println!("skipped: {reason}");
            return;
        }
        for (version, cipher) in [
            (TlsVersion::Tls13, KtlsCipher::Aes128Gcm),
            (TlsVersion::Tls12, KtlsCipher::Aes256Gcm),
            (TlsVersion::Tls13, KtlsCipher::Chacha20Poly1305),
        ] {
            let (client, server) = tcp_pair();
            let (k, i, s, r) = cipher.lengths();
            let (key, iv, salt, rec_seq) = (vec![1u8; k], vec![2u8; i], vec![3u8; s], vec![0u8; r]);
            let secrets = KtlsSecrets {
                key: &key,
                iv: &iv,
                salt: &salt,
                rec_seq: &rec_seq,
            };
            set_tcp_ulp(client.as_fd(), "tls").unwrap();
            set_ktls_crypto(client.as_fd(), KtlsDirection::Tx, version, cipher, &secrets).unwrap();
            set_tcp_ulp(server.as_fd(), "tls").unwrap();
            set_ktls_crypto(server.as_fd(), KtlsDirection::Rx, version, cipher, &secrets).unwrap();
        }
    }
}
