//! A headless Chromium driven over the DevTools protocol (raw CDP over a websocket, no
//! webdriver), for the tests that need a real browser: its own profile directory, killed
//! (its whole process group) on drop. `chromium()` finds the binary or says why not.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::tls::TempDir;

/// A headless Chromium with its own profile directory; killed (its whole process group) on
/// drop.
pub struct Browser {
    child: Child,
    socket: tungstenite::WebSocket<TcpStream>,
    /// The page target's flat session.
    session: String,
    next_id: u64,
    _profile: TempDir,
}

/// The browser's binary, or why there is none.
pub fn chromium() -> Result<PathBuf, String> {
    for candidate in ["chromium", "chromium-browser", "google-chrome"] {
        let found = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join(candidate))
            .find(|p| p.is_file());
        if let Some(path) = found {
            return Ok(path);
        }
    }
    Err("chromium not installed".into())
}

/// The browser's binary, or `None` after saying why the test is skipped (never under CI,
/// which installs chromium: there a missing browser fails the test).
pub fn chromium_or_skip() -> Option<PathBuf> {
    match chromium() {
        Ok(b) => Some(b),
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{why}: .ci/run installs chromium; CI may not skip this test"
            );
            println!("skipped: {why}");
            None
        }
    }
}

/// Bounded wait for `f` to give a value.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Browser {
    pub fn launch(binary: &Path) -> Browser {
        Browser::launch_with(binary, &[])
    }

    /// `launch` with more command-line switches (before the first page).
    pub fn launch_with(binary: &Path, extra: &[String]) -> Browser {
        use std::os::unix::process::CommandExt;
        let profile = TempDir::new();
        let mut cmd = Command::new(binary);
        cmd.args([
            "--headless",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.0.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group, so that drop kills its renderers too.
        .process_group(0);
        if rustix::process::geteuid().is_root() {
            // Chromium refuses to run as root inside its sandbox.
            cmd.arg("--no-sandbox");
        }
        cmd.args(extra);
        cmd.arg("about:blank");
        let child = cmd.spawn().expect("spawn chromium");
        let port_file = profile.0.join("DevToolsActivePort");
        let (port, path) = wait_for(Duration::from_secs(30), "DevToolsActivePort", || {
            let text = std::fs::read_to_string(&port_file).ok()?;
            let mut lines = text.lines();
            let port: u16 = lines.next()?.trim().parse().ok()?;
            Some((port, lines.next()?.trim().to_string()))
        });
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let (socket, _) = tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), stream).expect("CDP websocket");
        let mut browser = Browser {
            child,
            socket,
            session: String::new(),
            next_id: 1,
            _profile: profile,
        };
        let target = browser.call("Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].as_str().expect("targetId").to_string();
        let attached = browser.call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true}));
        browser.session = attached["sessionId"].as_str().expect("sessionId").to_string();
        browser
    }

    /// Sends one CDP command (to the page's session once attached) and waits for its result,
    /// skipping events.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        self.socket
            .send(tungstenite::Message::text(message.to_string()))
            .expect("CDP send");
        for _ in 0..10_000 {
            let text = match self.socket.read().expect("CDP read") {
                tungstenite::Message::Text(t) => t.to_string(),
                _ => continue,
            };
            let reply: Value = serde_json::from_str(&text).unwrap();
            if reply["id"] != id {
                continue;
            }
            assert!(reply["error"].is_null(), "{method}: {reply}");
            return reply["result"].clone();
        }
        panic!("{method}: no answer among 10,000 messages");
    }

    /// Evaluates `expression` in the page; its value.
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(result["exceptionDetails"].is_null(), "{expression}: {result}");
        result["result"]["value"].clone()
    }

    /// Polls `expression` until it yields `want` (bounded).
    pub fn wait_value(&mut self, expression: &str, want: &Value, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let got = self.eval(expression);
            if &got == want {
                return;
            }
            assert!(Instant::now() < deadline, "{expression} is {got}, not {want}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32);
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
