//! A real headless Chromium (Debian's `chromium` package, which
//! `scripts/test` installs), driven over the DevTools protocol, for tests
//! of what the broker shows a person (the status page of the HTTP gateway).
//!
//! [`Browser::start`] runs `chromium --headless` with a fresh profile and
//! `--remote-debugging-port=0`, reads the port it chose from the profile's
//! `DevToolsActivePort` file, and connects to its page's websocket. Then:
//! [`Browser::open`] navigates and waits for the load event;
//! [`Browser::wait_for`] waits, in the page, until a JavaScript condition
//! holds (re-checked at every DOM mutation and every 50 ms, with a
//! timeout), so that a test waits on what the page does and never sleeps;
//! [`Browser::evaluate`] runs a script (to type in a field and submit a
//! form); [`Browser::screenshot`] writes a PNG of the whole page. What the page logs (console messages,
//! uncaught exceptions, Content-Security-Policy refusals) is kept in
//! [`Browser::log`] and printed when a wait fails. Chromium and every
//! process it started are killed on drop, and the profile removed.

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::{tungstenite::Message, MaybeTlsStream, WebSocketStream};

/// The size of the window, in CSS pixels: what screenshots show (a page
/// longer than it is captured whole).
pub const VIEWPORT: (u32, u32) = (1280, 800);

/// How long Chromium may take to start and listen for DevTools.
const START_LIMIT: Duration = Duration::from_secs(30);

/// How long a DevTools command may take beyond what it waits for itself.
const COMMAND_SLACK: Duration = Duration::from_secs(15);

/// How long Chromium may take to quit when asked before it is killed.
const QUIT_LIMIT: Duration = Duration::from_secs(5);

/// The chromium binary: `$LEASEHOLD_CHROMIUM`, else `chromium` on the PATH.
fn chromium_binary() -> String {
    std::env::var("LEASEHOLD_CHROMIUM").unwrap_or_else(|_| "chromium".into())
}

/// A headless Chromium with one page, driven over the DevTools protocol;
/// killed (with every process it started) on drop.
pub struct Browser {
    child: Child,
    profile: PathBuf,
    page: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    seen: Seen,
}

/// What the page's events said.
#[derive(Default)]
struct Seen {
    /// Whether a load event came since the last navigation began.
    loaded: bool,
    /// Console messages, exceptions and log entries, one line each.
    log: Vec<String>,
}

impl Browser {
    /// Starts Chromium headless with a fresh profile and connects to its
    /// page. Panics, saying to install it, when there is no `chromium`.
    pub async fn start() -> Browser {
        static STARTED: AtomicU64 = AtomicU64::new(0);
        let profile = std::env::temp_dir().join(format!(
            "leasehold-chromium-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).expect("a profile directory for chromium");
        let binary = chromium_binary();
        let mut child = Command::new(&binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--hide-scrollbars",
                "--mute-audio",
                "--lang=en-US",
            ])
            .arg(format!("--window-size={},{}", VIEWPORT.0, VIEWPORT.1))
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("--remote-debugging-port=0")
            .arg("about:blank")
            // A process group of its own, so that drop kills the renderers
            // and helpers too.
            .process_group(0)
            .env("TZ", "UTC")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run '{binary}' ({e}): this test needs a headless \
                     Chromium: install Debian's chromium package (apt-get install chromium; \
                     scripts/test does) or set LEASEHOLD_CHROMIUM to a Chromium binary"
                )
            });
        // Chromium says "DevTools listening on ws://..." on stderr once the
        // port is open (and DevToolsActivePort written).
        let stderr = child.stderr.take().expect("piped stderr");
        let pid = child.id();
        let Some(child) = super::ready_when(child, stderr, "DevTools listening on", START_LIMIT)
        else {
            kill_group(pid);
            let _ = std::fs::remove_dir_all(&profile);
            panic!("'{binary}' did not start listening for DevTools within {START_LIMIT:?}");
        };
        // Until the page is connected, a panic must still kill it.
        let mut guard = Group {
            pid,
            profile: profile.clone(),
            armed: true,
        };
        let active = devtools_active_port(&profile);
        let mut lines = active.lines();
        let port: u16 = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("no port in DevToolsActivePort: {active:?}"));
        let browser_path = lines.next().unwrap_or("/devtools/browser").trim();

        // The browser's own endpoint names the page it opened.
        let (mut control, _) =
            tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}{browser_path}"))
                .await
                .expect("connect to chromium's DevTools endpoint");
        let targets = command(
            &mut control,
            1,
            "Target.getTargets",
            json!({}),
            &mut Seen::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("Target.getTargets: {e}"));
        let page_id = targets["targetInfos"]
            .as_array()
            .and_then(|targets| targets.iter().find(|t| t["type"] == "page"))
            .and_then(|t| t["targetId"].as_str())
            .unwrap_or_else(|| panic!("chromium opened no page: {targets}"))
            .to_owned();
        let _ = control.close(None).await;
        let (page, _) = tokio_tungstenite::connect_async(format!(
            "ws://127.0.0.1:{port}/devtools/page/{page_id}"
        ))
        .await
        .expect("connect to the page's DevTools endpoint");
        // The Browser's own drop takes over.
        guard.armed = false;
        let mut browser = Browser {
            child,
            profile,
            page,
            next_id: 1,
            seen: Seen::default(),
        };
        browser.call("Page.enable", json!({})).await;
        browser.call("Runtime.enable", json!({})).await;
        browser.call("Log.enable", json!({})).await;
        browser
            .call(
                "Emulation.setDeviceMetricsOverride",
                json!({
                    "width": VIEWPORT.0,
                    "height": VIEWPORT.1,
                    "deviceScaleFactor": 1,
                    "mobile": false,
                }),
            )
            .await;
        browser
    }

    /// Navigates the page to `url` and waits for its load event.
    pub async fn open(&mut self, url: &str) {
        self.seen.loaded = false;
        let navigated = self.call("Page.navigate", json!({ "url": url })).await;
        if let Some(error) = navigated["errorText"].as_str().filter(|e| !e.is_empty()) {
            panic!("navigating to {url} failed: {error}");
        }
        let deadline = tokio::time::Instant::now() + COMMAND_SLACK;
        while !self.seen.loaded {
            let message = tokio::time::timeout_at(deadline, self.page.next())
                .await
                .unwrap_or_else(|_| panic!("{url} did not load within {COMMAND_SLACK:?}"));
            note(&read(message), &mut self.seen);
        }
    }

    /// Waits until the JavaScript expression `condition` is truthy in the
    /// page, for at most `limit`, and returns its value (as JSON). The
    /// page checks it at once, then at every change of the DOM (a
    /// MutationObserver) and every 50 ms (for a condition on what is not
    /// in the DOM), and fails the wait when `limit` runs out; a failed
    /// wait panics with the condition, the page's text and its log.
    pub async fn wait_for(&mut self, condition: &str, limit: Duration) -> Value {
        let millis = limit.as_millis();
        let script = format!(
            r#"new Promise((resolve, reject) => {{
                const holds = () => {{ return ({condition}); }};
                let observer = null;
                let timer = 0;
                let poll = 0;
                const stop = () => {{
                    if (observer) observer.disconnect();
                    clearTimeout(timer);
                    clearInterval(poll);
                }};
                const check = () => {{
                    let value;
                    try {{ value = holds(); }} catch (e) {{ value = undefined; }}
                    if (!value) return false;
                    stop();
                    resolve(value);
                    return true;
                }};
                if (check()) return;
                observer = new MutationObserver(check);
                observer.observe(document, {{ subtree: true, childList: true, characterData: true, attributes: true }});
                poll = setInterval(check, 50);
                timer = setTimeout(() => {{
                    if (check()) return;
                    stop();
                    reject(new Error("timed out after {millis} ms"));
                }}, {millis});
            }})"#
        );
        match self.run(&script, limit).await {
            Ok(value) => value,
            Err(e) => {
                let text = self
                    .run(
                        "document.body ? document.body.innerText : ''",
                        COMMAND_SLACK,
                    )
                    .await
                    .unwrap_or_default();
                panic!(
                    "waiting for `{condition}`: {e}\n--- the page's text:\n{}\n--- its log:\n{}",
                    text.as_str().unwrap_or_default(),
                    self.seen.log.join("\n")
                );
            }
        }
    }

    /// Runs the JavaScript `expression` in the page (awaiting it if it is a
    /// promise) and returns its value as JSON; panics if it throws.
    pub async fn evaluate(&mut self, expression: &str) -> Value {
        self.run(expression, COMMAND_SLACK)
            .await
            .unwrap_or_else(|e| panic!("evaluating `{expression}`: {e}"))
    }

    /// Writes a PNG of the whole page (beyond the window if it is longer,
    /// and no more than it if it is shorter) to `path`, creating its
    /// folder.
    pub async fn screenshot(&mut self, path: &Path) {
        let height = self
            .evaluate("Math.ceil(document.documentElement.getBoundingClientRect().height)")
            .await
            .as_f64()
            .filter(|h| *h >= 1.0)
            .unwrap_or(f64::from(VIEWPORT.1));
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({
                    "format": "png",
                    "captureBeyondViewport": true,
                    "clip": {
                        "x": 0,
                        "y": 0,
                        "width": f64::from(VIEWPORT.0),
                        "height": height,
                        "scale": 1,
                    },
                }),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("a screenshot's data"))
            .expect("a screenshot in base64");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// What the page logged so far: console messages, uncaught exceptions
    /// and the browser's own entries (a refused resource, a
    /// Content-Security-Policy violation), one line each, with its level.
    pub fn log(&self) -> &[String] {
        &self.seen.log
    }

    /// Runtime.evaluate, awaiting a promise, for at most `limit` plus
    /// [`COMMAND_SLACK`]; the exception's text if it threw.
    async fn run(&mut self, expression: &str, limit: Duration) -> Result<Value, String> {
        let id = self.next_id();
        let answer = tokio::time::timeout(
            limit + COMMAND_SLACK,
            command(
                &mut self.page,
                id,
                "Runtime.evaluate",
                json!({
                    "expression": expression,
                    "awaitPromise": true,
                    "returnByValue": true,
                    "userGesture": true,
                }),
                &mut self.seen,
            ),
        )
        .await
        .map_err(|_| format!("no answer from chromium within {:?}", limit + COMMAND_SLACK))?
        .map_err(|e| format!("Runtime.evaluate: {e}"))?;
        if let Some(exception) = answer.get("exceptionDetails") {
            let description = exception["exception"]["description"]
                .as_str()
                .or_else(|| exception["text"].as_str())
                .unwrap_or("an exception");
            return Err(description.to_owned());
        }
        Ok(answer["result"]["value"].clone())
    }

    /// A DevTools command on the page; panics if it fails.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id();
        tokio::time::timeout(
            COMMAND_SLACK,
            command(&mut self.page, id, method, params, &mut self.seen),
        )
        .await
        .unwrap_or_else(|_| panic!("{method}: no answer from chromium within {COMMAND_SLACK:?}"))
        .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

impl Drop for Browser {
    /// Asks Chromium to quit (SIGTERM: it closes its renderers and helpers
    /// and reaps them), waits for it a moment, then kills whatever of its
    /// process group is left.
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid, which it has not been
        // waited for yet (so not reused).
        unsafe {
            libc::kill(super::as_pid(self.child.id()), libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + QUIT_LIMIT;
        while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        kill_group(self.child.id());
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The `DevToolsActivePort` file of a Chromium that said it listens: its
/// port and its browser endpoint's path, one a line. Chromium writes it
/// about when it says so, sometimes just after: read until both lines are
/// there, for a moment.
fn devtools_active_port(profile: &Path) -> String {
    let path = profile.join("DevToolsActivePort");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.lines().count() >= 2 {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "chromium said it listens for DevTools, but {} holds {text:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills a Chromium that has not become a [`Browser`] yet (a panic while
/// connecting), with its profile.
struct Group {
    pid: u32,
    profile: PathBuf,
    /// False once a [`Browser`] owns the process.
    armed: bool,
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.armed {
            kill_group(self.pid);
            let _ = std::fs::remove_dir_all(&self.profile);
        }
    }
}

/// SIGKILL to the process group Chromium leads (its own, from
/// `process_group(0)`): the browser, its renderers and helpers.
fn kill_group(pid: u32) {
    // SAFETY: kill(2) on the process group of our own child, which leads
    // it (its id is the group's); never 0 or -1, since as_pid is positive.
    unsafe {
        libc::kill(-super::as_pid(pid), libc::SIGKILL);
    }
}

/// Sends one command and reads messages until its answer, noting the
/// events that come first in `seen`.
async fn command(
    socket: &mut WebSocketStream<MaybeTlsStream<TcpStream>>,
    id: u64,
    method: &str,
    params: Value,
    seen: &mut Seen,
) -> Result<Value, String> {
    let request = json!({ "id": id, "method": method, "params": params });
    socket
        .send(Message::text(request.to_string()))
        .await
        .map_err(|e| format!("send to chromium: {e}"))?;
    loop {
        let message = read(socket.next().await);
        if message["id"].as_u64() == Some(id) {
            if let Some(error) = message.get("error") {
                return Err(error.to_string());
            }
            return Ok(message["result"].clone());
        }
        note(&message, seen);
    }
}

/// One DevTools message as JSON; panics if the connection failed.
fn read(message: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>) -> Value {
    match message {
        Some(Ok(Message::Text(text))) => {
            serde_json::from_str(text.as_str()).expect("DevTools messages are JSON")
        }
        Some(Ok(other)) => json!({ "ignored": other.to_string() }),
        Some(Err(e)) => panic!("the DevTools connection failed: {e}"),
        None => panic!("chromium closed the DevTools connection"),
    }
}

/// Notes an event: console messages, exceptions and log entries in the
/// log, and the load event.
fn note(message: &Value, seen: &mut Seen) {
    let params = &message["params"];
    let log = &mut seen.log;
    match message["method"].as_str() {
        Some("Page.loadEventFired") => seen.loaded = true,
        Some("Runtime.consoleAPICalled") => {
            let args: Vec<String> = params["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| {
                    a["value"]
                        .as_str()
                        .map(ToOwned::to_owned)
                        .or_else(|| a["description"].as_str().map(ToOwned::to_owned))
                        .unwrap_or_else(|| a["value"].to_string())
                })
                .collect();
            log.push(format!(
                "console.{}: {}",
                params["type"].as_str().unwrap_or("log"),
                args.join(" ")
            ));
        }
        Some("Runtime.exceptionThrown") => {
            let details = &params["exceptionDetails"];
            log.push(format!(
                "error (uncaught): {}",
                details["exception"]["description"]
                    .as_str()
                    .or_else(|| details["text"].as_str())
                    .unwrap_or("an exception")
            ));
        }
        Some("Log.entryAdded") => {
            let entry = &params["entry"];
            log.push(format!(
                "{} ({}): {}{}",
                entry["level"].as_str().unwrap_or("info"),
                entry["source"].as_str().unwrap_or("other"),
                entry["text"].as_str().unwrap_or_default(),
                entry["url"]
                    .as_str()
                    .map(|u| format!(" [{u}]"))
                    .unwrap_or_default()
            ));
        }
        _ => {}
    }
}
