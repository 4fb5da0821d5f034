//! A recording origin: records the exact bytes of every connection, tagged with the case
//! that was current when it was accepted, and answers each request it can frame (see
//! `frame`) with an empty `200` that says `Connection: close` (bytes it cannot frame get a
//! `400`, also with close).
//!
//! `Connection: close` makes both proxies drop the server connection after each response, so
//! a case's connections all end soon after its client goes away and no pooled connection
//! carries bytes into the next case. After answering, the origin keeps reading until the
//! proxy closes: bytes a proxy sends past the message it framed are what this test is after.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::frame::{Step, parse_one};

const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
const REFUSE: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

struct Conn {
    case: u64,
    bytes: Vec<u8>,
    open: bool,
}

struct State {
    case: u64,
    conns: Vec<Conn>,
    /// Last accept or read, for `settle`.
    last_activity: Instant,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

pub struct Recorder {
    pub addr: SocketAddr,
    shared: Shared,
}

impl Recorder {
    pub fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared: Shared = Arc::new((
            Mutex::new(State {
                case: 0,
                conns: Vec::new(),
                last_activity: Instant::now(),
            }),
            Condvar::new(),
        ));
        let s = shared.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let idx = {
                    let mut st = s.0.lock().unwrap();
                    let case = st.case;
                    st.last_activity = Instant::now();
                    st.conns.push(Conn {
                        case,
                        bytes: Vec::new(),
                        open: true,
                    });
                    st.conns.len() - 1
                };
                let s = s.clone();
                thread::spawn(move || serve(stream, idx, &s));
            }
        });
        Recorder { addr, shared }
    }

    /// Connections accepted from now on belong to `case`.
    pub fn begin(&self, case: u64) {
        self.shared.0.lock().unwrap().case = case;
    }

    /// Waits (at most `limit`) until every connection of `case` is closed, then returns the
    /// bytes of each in accept order and forgets them.
    pub fn finish(&self, case: u64, limit: Duration) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + limit;
        let (lock, cv) = &*self.shared;
        let mut st = lock.lock().unwrap();
        loop {
            let open = st.conns.iter().any(|c| c.case == case && c.open);
            let now = Instant::now();
            if !open || now >= deadline {
                break;
            }
            st = cv.wait_timeout(st, deadline - now).unwrap().0;
        }
        st.conns
            .iter_mut()
            .filter(|c| c.case == case)
            .map(|c| std::mem::take(&mut c.bytes))
            .collect()
    }

    /// Waits (at most `limit`) until nothing was accepted or read for `quiet`: a proxy that
    /// still forwards for an earlier, abandoned run has had its chance to finish first.
    /// Quiet is an absence of events, so there is no signal to wait on but the clock.
    pub fn settle(&self, quiet: Duration, limit: Duration) {
        let deadline = Instant::now() + limit;
        let (lock, cv) = &*self.shared;
        let mut st = lock.lock().unwrap();
        loop {
            let now = Instant::now();
            let calm_at = st.last_activity + quiet;
            if now >= calm_at || now >= deadline {
                return;
            }
            st = cv.wait_timeout(st, calm_at.min(deadline) - now).unwrap().0;
        }
    }
}

fn serve(mut stream: TcpStream, idx: usize, shared: &Shared) {
    // A backstop only: proxies close the connection when their client goes.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    let mut seen = Vec::new();
    let mut answered = 0usize; // bytes of `seen` already framed and answered
    let mut framing = true;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        seen.extend_from_slice(&buf[..n]);
        {
            let mut st = shared.0.lock().unwrap();
            st.conns[idx].bytes.extend_from_slice(&buf[..n]);
            st.last_activity = Instant::now();
        }
        while framing {
            match parse_one(&seen[answered..]) {
                Step::Complete(_, used) => {
                    answered += used;
                    let _ = stream.write_all(ANSWER);
                }
                Step::Partial => break,
                Step::Invalid(_) => {
                    // Answered too, so the proxy closes this connection instead of waiting
                    // for a response until its server timeout.
                    let _ = stream.write_all(REFUSE);
                    framing = false;
                }
            }
        }
    }
    let (lock, cv) = &**shared;
    lock.lock().unwrap().conns[idx].open = false;
    cv.notify_all();
}
