//! Outside text and outside servers that mean harm, and what no command may then do: print a
//! control character, an escape sequence or a bidi mark to a terminal or a text file, print a
//! URL's password, print NaN, infinity or a 300-digit number, write through a symbolic link, or
//! read a config file or a query answer without a bound.
//!
//! The hostile names come from a trace (`diagnose`, as any user on a GPU node can name their
//! process) and from a Prometheus query API (`fleet`, `fleet job`). The query API is a real HTTP
//! server on a local port, run by the test on a thread, answering what a Prometheus holding
//! such series would answer (and worse: NaN, +Inf, 1e300, an endless answer).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{free_port, gpuslack, repo, scrape, stderr, stdout, temp_dir};
use serde_json::{json, Value};

/// A name a user could give their process, pod or Slurm account: a window-title sequence ended
/// by BEL, a clear-screen, a carriage return, the right-to-left override and an isolate, a C1
/// CSI, DEL, the right-to-left mark and the Arabic letter mark.
const EVIL: &str = "ev\u{1b}]0;owned\u{7}il\u{1b}[2J\r\u{202e}gnp.exe\u{2066}x\u{2069}\u{9b}31m\u{7f}\u{200f}\u{61c}\u{0}\tend";

/// What may not appear in text meant for a terminal, with where it was found.
fn hostile_bytes(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, c) in text.char_indices() {
        let bad = (c < ' ' && c != '\n')
            || c == '\u{7f}'
            || ('\u{80}'..='\u{9f}').contains(&c)
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}');
        if bad {
            let from = text[..i].char_indices().rev().nth(30).map_or(0, |(j, _)| j);
            found.push(format!(
                "U+{:04X} after {:?}",
                c as u32,
                &text[from..i].escape_debug().to_string()
            ));
        }
    }
    found
}

fn assert_clean(what: &str, text: &str) {
    let found = hostile_bytes(text);
    assert!(
        found.is_empty(),
        "{what}: {} hostile characters, first {:?}",
        found.len(),
        &found[..found.len().min(5)]
    );
}

/// No number printed is NaN or infinite, and no run of digits is longer than 20.
fn assert_numbers_bounded(what: &str, text: &str) {
    for token in text.split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | ',' | ':')) {
        let t = token.trim_end_matches(['%', '.']);
        if let Ok(v) = t.parse::<f64>() {
            assert!(v.is_finite(), "{what}: {token:?} printed in\n{text}");
        }
        let longest_run = t
            .split(|c: char| !c.is_ascii_digit())
            .map(str::len)
            .max()
            .unwrap_or(0);
        assert!(longest_run <= 20, "{what}: {token:?} printed in\n{text}");
    }
}

// ---------------------------------------------------------------------------------------------
// diagnose

/// `h200-live-torch` with every sample held by a process and a pod whose every name is
/// hostile, one user name of 100,000 characters, and a column whose name is hostile (which
/// the reader names in a warning).
fn hostile_trace(dir: &Path) -> PathBuf {
    hostile_trace_padded(dir, 100_000)
}

/// [`hostile_trace`] with the user name padded by `user_pad` characters.
fn hostile_trace_padded(dir: &Path, user_pad: usize) -> PathBuf {
    let text = std::fs::read_to_string(repo("tests/fixtures/h200-live-torch/samples.csv"))
        .expect("fixture");
    let mut lines = text.lines();
    let header = lines.next().expect("header");
    let process = json!([{
        "pid": 4242,
        "pgid": 4240,
        "name": EVIL,
        "user": format!("{EVIL}{}", "A".repeat(user_pad)),
        "slurm_job": EVIL,
        "container_id": "\u{1b}[31méééééééé0123456789abcdef",
        "pod_uid": EVIL,
        "job_key": EVIL,
        "slurm_user": EVIL,
        "slurm_account": EVIL,
        "slurm_partition": EVIL,
    }]);
    let pods = json!([{ "pod": EVIL, "namespace": EVIL, "container": EVIL }]);
    let cell = |v: &Value| format!("\"{}\"", v.to_string().replace('"', "\"\""));
    let (process, pods) = (cell(&process), cell(&pods));
    let mut out = format!("{header},processes,pods,col\u{202e}\u{2066}\t\u{1b}]0;t\u{7}x\n");
    for line in lines {
        out.push_str(&format!("{line},{process},{pods},\n"));
    }
    let path = dir.join("hostile.csv");
    std::fs::write(&path, out).expect("trace");
    path
}

#[test]
fn diagnose_of_hostile_names_prints_no_control_character_or_bidi_mark() {
    let dir = temp_dir("hostile-diagnose");
    let trace = hostile_trace(&dir);
    // The file's own name is anyone's too: the report names it.
    let renamed = dir.join("trace\u{1b}[2J\u{202e}x.csv");
    std::fs::copy(&trace, &renamed).expect("copy");
    let trace = renamed.display().to_string();
    let html = dir.join("report.html");
    let html_arg = html.display().to_string();
    for args in [
        vec!["diagnose", "--trace", &trace],
        vec!["diagnose", "--trace", &trace, "--detail", "-v"],
        vec!["diagnose", "--trace", &trace, "--format", "json"],
        vec!["diagnose", "--trace", &trace, "--html", &html_arg],
    ] {
        let out = gpuslack(&args, &[]);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_clean(&format!("{args:?} stdout"), &stdout(&out));
        assert_clean(&format!("{args:?} stderr"), &stderr(&out));
        // The names are there, shown escaped; the 100,000-character one capped.
        let text = stdout(&out);
        assert!(
            text.contains("\\x1b]0;owned\\x07il") || text.contains("\\\\x1b]0;owned\\\\x07il"),
            "{args:?}: the escaped name is not shown:\n{}",
            &text[..text.len().min(3000)]
        );
        assert!(
            !text.contains(&"A".repeat(1000)),
            "{args:?}: a 100,000-character user printed whole ({} bytes)",
            text.len()
        );
    }
    let page = std::fs::read_to_string(&html).expect("the page");
    assert_clean("--html page", &page);
    assert!(
        page.contains("\\u{202e}gnp.exe"),
        "the page names the process"
    );
    // The trace (a 100,000-character name on every process row) is ~150 MB: not left behind.
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_agents_log_lines_of_hostile_names_hold_no_control_character_or_bidi_mark() {
    let dir = temp_dir("hostile-run");
    let trace = hostile_trace(&dir);
    let out = gpuslack(
        &[
            "run",
            "--replay",
            &trace.display().to_string(),
            "--speed",
            "0",
            "-vv",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    // The job (`slurm:` and the hostile Slurm id) is named in each "diagnosis changed" line,
    // the hostile column in the reader's warning.
    assert!(
        err.contains("diagnosis changed")
            && err.contains("slurm:ev")
            && err.contains("ignoring columns"),
        "{}",
        &err[..err.len().min(3000)]
    );
    assert_clean("run's log", &err);
    for line in err.lines() {
        assert!(line.len() < 16_384, "a log line of {} bytes", line.len());
    }
}

#[test]
fn a_scrape_of_hostile_names_holds_no_control_character_or_bidi_mark_and_stays_valid() {
    let dir = temp_dir("hostile-scrape");
    let trace = hostile_trace_padded(&dir, 0);
    let port = free_port();
    // A resource attribute of the same (an environment cannot carry NUL).
    let evil_env = EVIL.replace('\0', "");
    let agent = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args([
            "run",
            "--replay",
            &trace.display().to_string(),
            "--speed",
            "0",
        ])
        .args([
            "--linger-s",
            "30",
            "--prometheus",
            &format!("127.0.0.1:{port}"),
        ])
        .env("GPUSLACK_METRICS", "full")
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("k8s.cluster.name={evil_env}"),
        )
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent starts");
    let _agent = common::Server(agent);
    common::wait_for_port(port, "gpuslack's Prometheus endpoint");
    // The process's own series appear once its windows are out.
    let started = Instant::now();
    let mut body = scrape(port);
    while !body.contains("process_executable_name=") && started.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(300));
        body = scrape(port);
    }
    assert!(
        body.contains("process_executable_name="),
        "{}",
        &body[..body.len().min(2000)]
    );
    assert_clean("/metrics", &body);
    // Each name is there, escaped visibly (then its backslash escaped by the exposition).
    for label in [
        "process_executable_name",
        "k8s_pod_name",
        "k8s_namespace_name",
        "k8s_cluster_name",
    ] {
        assert!(
            body.contains(&format!(
                "{label}=\"ev\\\\x1b]0;owned\\\\x07il\\\\x1b[2J\\\\r\\\\u{{202e}}gnp.exe"
            )),
            "{label} is not shown escaped"
        );
    }
    // And the exposition stays valid for the strict parser.
    common::assert_promtool_accepts(&body);
}

// ---------------------------------------------------------------------------------------------
// A Prometheus query API on a thread

/// A request as the server read it: path, the decoded `query` parameter, the whole head.
#[derive(Debug, Clone)]
struct Request {
    path: String,
    query: String,
    head: String,
}

/// What the server answers a request with.
enum Answer {
    /// Status and body.
    Body(u16, Vec<u8>),
    /// A 200 whose JSON body never ends (until `bytes` are written or the client leaves).
    Endless { bytes: usize },
    /// A 302 to this `Location`.
    Redirect(String),
}

/// A query API on a free local port, answering each request with `answer`; it stops with the
/// test process.
struct QueryApi {
    port: u16,
    seen: Arc<Mutex<Vec<Request>>>,
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_api(answer: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> QueryApi {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let answer = Arc::new(answer);
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answer = answer.clone();
            let log = log.clone();
            std::thread::spawn(move || serve(stream, &*answer, &log));
        }
    });
    QueryApi { port, seen }
}

fn serve(stream: TcpStream, answer: &dyn Fn(&Request) -> Answer, log: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut head = String::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let end = line == "\r\n";
        head.push_str(&line);
        if end {
            break;
        }
    }
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (path, params) = target.split_once('?').unwrap_or((&target, ""));
    let query = params
        .split('&')
        .find_map(|p| p.strip_prefix("query="))
        .map(percent_decode)
        .unwrap_or_default();
    let request = Request {
        path: path.to_string(),
        query,
        head,
    };
    let reply = answer(&request);
    if let Ok(mut seen) = log.lock() {
        seen.push(request);
    }
    let mut stream = stream;
    match reply {
        Answer::Body(status, body) => {
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(&body);
        }
        Answer::Redirect(to) => {
            let _ = write!(
                stream,
                "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
        Answer::Endless { bytes } => {
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
            );
            let _ = stream
                .write_all(br#"{"status":"success","data":{"resultType":"vector","result":["#);
            let series = br#"{"metric":{"gpuslack_job_id":"slurm:1","gpuslack_diagnosis_class":"idle"},"value":[1.0,"1"]},"#;
            let chunk: Vec<u8> = series
                .iter()
                .copied()
                .cycle()
                .take(series.len() * 1000)
                .collect();
            let mut written = 0;
            while written < bytes {
                if stream.write_all(&chunk).is_err() {
                    return;
                }
                written += chunk.len();
            }
            let _ = stream.write_all(br#"{"metric":{},"value":[1.0,"1"]}]}}"#);
        }
    }
}

fn vector(series: &[(Value, &str)]) -> Answer {
    let result: Vec<Value> = series
        .iter()
        .map(|(metric, v)| json!({ "metric": metric, "value": [1_796_000_000.0, v] }))
        .collect();
    Answer::Body(
        200,
        json!({"status": "success", "data": {"resultType": "vector", "result": result}})
            .to_string()
            .into_bytes(),
    )
}

/// What a Prometheus holding hostile series would answer every query of `fleet` and `fleet
/// job`, with three values no counter can have: NaN, +Inf and 1e300.
fn hostile_answer(r: &Request) -> Answer {
    let q = r.query.as_str();
    if r.path.ends_with("query_range") {
        let values: Vec<Value> = (0..30)
            .map(|i| json!([1_795_999_000.0 + 30.0 * f64::from(i), "1"]))
            .collect();
        let mut odd = values.clone();
        odd.push(json!([1e300, "1"]));
        let result = json!([
            {"metric": {"instance": EVIL, "hw_id": EVIL, "gpuslack_gpu_index": EVIL,
                        "gpuslack_diagnosis_class": "sync_wait"}, "values": values},
            {"metric": {"instance": "node-b:9400", "hw_id": "GPU-b", "gpuslack_gpu_index": "0",
                        "gpuslack_diagnosis_class": EVIL}, "values": odd},
        ]);
        return Answer::Body(
            200,
            json!({"status": "success", "data": {"resultType": "matrix", "result": result}})
                .to_string()
                .into_bytes(),
        );
    }
    if q.contains("target_info") {
        return vector(&[(json!({"instance": EVIL, "host_name": EVIL}), "1")]);
    }
    if q.contains("gpuslack_job_info") && !q.contains("gpuslack_diagnosis_") {
        return vector(&[(
            json!({"gpuslack_job_id": EVIL, "slurm_job_user": EVIL, "slurm_job_account": EVIL,
                   "instance": EVIL, "hw_id": EVIL, "gpuslack_job_rank": EVIL}),
            "1",
        )]);
    }
    let energy = q.contains("energy");
    let rank = |instance: &str, class: &str| {
        json!({"instance": instance, "hw_id": instance, "gpuslack_gpu_index": instance,
               "gpuslack_diagnosis_class": class,
               "gpuslack_job_id": EVIL, "k8s_namespace_name": EVIL, "process_owner": EVIL})
    };
    let mut series = vec![
        (
            rank(EVIL, "sync_wait"),
            if energy { "360000" } else { "3600" },
        ),
        (rank(EVIL, EVIL), if energy { "720000" } else { "7200" }),
        (rank("node-b:9400", "compute_bound"), "NaN"),
        (rank("node-c:9400", "compute_bound"), "+Inf"),
    ];
    let huge = format!("1{}", "0".repeat(300));
    series.push((rank("node-d:9400", "idle"), huge.as_str()));
    vector(&series)
}

fn fleet(url: &str, args: &[&str]) -> Output {
    let mut all = vec![
        "fleet",
        "--prometheus",
        url,
        "--at",
        "1796000000",
        "--since",
        "1d",
    ];
    all.extend_from_slice(args);
    gpuslack(&all, &[])
}

#[test]
fn fleet_and_fleet_job_of_hostile_labels_print_no_control_character_nan_or_huge_number() {
    let api = query_api(hostile_answer);
    let url = format!("http://127.0.0.1:{}", api.port);
    let dir = temp_dir("hostile-fleet");
    let html = dir.join("job.html");
    let html_arg = html.display().to_string();
    for args in [
        vec![],
        vec!["--json"],
        vec!["--price-gpu-hour", "2.5", "--price-kwh", "0.3"],
        vec!["job", "slurm:1"],
        vec!["job", "slurm:1", "--json"],
        vec!["job", "slurm:1", "--html", &html_arg],
    ] {
        let out = fleet(&url, &args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let (text, err) = (stdout(&out), stderr(&out));
        assert_clean(&format!("fleet {args:?} stdout"), &text);
        assert_clean(&format!("fleet {args:?} stderr"), &err);
        if !args.contains(&"--json") {
            assert_numbers_bounded(&format!("fleet {args:?}"), &text);
        } else {
            let v: Value = serde_json::from_str(&text).expect("JSON");
            assert_numbers_bounded(&format!("fleet {args:?}"), &v.to_string());
        }
        assert!(
            text.contains("\\x1b]0;owned\\x07il") || text.contains("\\\\x1b]0;owned\\\\x07il"),
            "fleet {args:?}: the escaped name is not shown:\n{text}"
        );
        // The values no counter can have (NaN, +Inf, 1e300 of time and of energy, and for a
        // job a timeline point at 1e300) are left out, and said so.
        let refused = if args.contains(&"job") { 7 } else { 6 };
        assert!(
            err.contains(&format!(
                "warning: {refused} values the query API answered were left out"
            )),
            "fleet {args:?}: no warning about the refused values: {err}"
        );
    }
    let page = std::fs::read_to_string(&html).expect("the page");
    assert_clean("fleet job --html page", &page);
}

// ---------------------------------------------------------------------------------------------
// Passwords

const PASSWORD: &str = "s3cr3t-pw";

fn assert_no_password(what: &str, out: &Output) {
    for (stream, text) in [("stdout", stdout(out)), ("stderr", stderr(out))] {
        assert!(
            !text.contains(PASSWORD) && !text.contains("alice:"),
            "{what} printed the password on {stream}:\n{text}"
        );
    }
}

#[test]
fn no_fleet_report_or_error_prints_the_query_apis_password() {
    let api = query_api(hostile_answer);
    let url = format!("http://alice:{PASSWORD}@127.0.0.1:{}", api.port);
    let shown = format!("http://127.0.0.1:{}", api.port);
    let out = fleet(&url, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_no_password("the report", &out);
    assert!(
        stdout(&out).contains(&format!("from {shown}")),
        "{}",
        stdout(&out)
    );
    let out = fleet(&url, &["--json"]);
    assert_no_password("--json", &out);
    let v: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(v["prometheus"], format!("{shown}/"));
    let out = fleet(&url, &["job", "slurm:1", "--json"]);
    assert_no_password("fleet job --json", &out);
    // The credentials still reach the server, as a Basic header.
    let seen = api.seen.lock().expect("log").clone();
    assert!(!seen.is_empty());
    for r in &seen {
        assert!(
            r.head
                .to_ascii_lowercase()
                .contains("authorization: basic ywxpy2u6cznjcjn0lxb3"),
            "{}",
            r.head
        );
    }

    // Every error.
    let closed = free_port();
    let out = fleet(&format!("http://alice:{PASSWORD}@127.0.0.1:{closed}"), &[]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_no_password("unreachable", &out);
    assert!(stderr(&out).contains(&format!("http://127.0.0.1:{closed}")));

    let html = query_api(|_| Answer::Body(404, b"<html>not here</html>".to_vec()));
    let out = fleet(
        &format!("http://alice:{PASSWORD}@127.0.0.1:{}", html.port),
        &[],
    );
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert_no_password("not Prometheus", &out);

    let empty = query_api(|_| vector(&[]));
    let out = fleet(
        &format!("http://alice:{PASSWORD}@127.0.0.1:{}", empty.port),
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_no_password("no data", &out);
    let out = fleet(
        &format!("http://alice:{PASSWORD}@127.0.0.1:{}", empty.port),
        &["job", "slurm:1"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_no_password("no data for a job", &out);

    for bad in [
        format!("http://alice:{PASSWORD}@host:99999"),
        format!("ftp://alice:{PASSWORD}@host/"),
        format!("http://alice:{PASSWORD}@"),
    ] {
        let out = fleet(&bad, &[]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert_no_password(&bad, &out);
    }
}

#[test]
fn fleet_sends_the_urls_query_on_every_request_and_prints_no_token() {
    const TOKEN: &str = "T0KEN-s3cr3t";
    let api = query_api(hostile_answer);
    let url = format!(
        "http://127.0.0.1:{}/?orgId=7&token={TOKEN}&X-Scope-OrgID=team-a",
        api.port
    );
    let shown = format!(
        "http://127.0.0.1:{}/?orgId=7&token=<redacted>&X-Scope-OrgID=team-a",
        api.port
    );
    for args in [
        vec![],
        vec!["--json"],
        vec!["job", "slurm:1"],
        vec!["job", "slurm:1", "--json"],
    ] {
        let out = fleet(&url, &args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        for (stream, text) in [("stdout", stdout(&out)), ("stderr", stderr(&out))] {
            assert!(
                !text.contains(TOKEN),
                "{args:?} printed the token on {stream}:\n{text}"
            );
        }
        if args.contains(&"--json") {
            let v: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
            if !args.contains(&"job") {
                assert_eq!(v["prometheus"], shown, "{v}");
            }
        } else if !args.contains(&"job") {
            assert!(stdout(&out).contains(&shown), "{}", stdout(&out));
        }
    }
    // Every request carried the whole query, the tenant and the token included.
    let seen = api.seen.lock().expect("log").clone();
    assert!(seen.len() >= 4, "{} requests", seen.len());
    for r in &seen {
        let target = r.head.split_whitespace().nth(1).unwrap_or("");
        assert!(
            target.contains(&format!(
                "?orgId=7&token={TOKEN}&X-Scope-OrgID=team-a&query="
            )),
            "{target}"
        );
    }
    // A redirect is not followed (the token would go where it points), and the error shows
    // where it pointed without the token.
    let elsewhere = query_api(hostile_answer);
    let port = elsewhere.port;
    let moved = query_api(move |_| {
        Answer::Redirect(format!(
            "http://127.0.0.1:{port}/api/v1/query?orgId=7&token={TOKEN}"
        ))
    });
    let out = fleet(
        &format!("http://127.0.0.1:{}/?orgId=7&token={TOKEN}", moved.port),
        &[],
    );
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(!err.contains(TOKEN), "{err}");
    assert!(
        err.contains("redirected to") && err.contains("token=<redacted>"),
        "{err}"
    );
    assert!(
        elsewhere.seen.lock().expect("log").is_empty(),
        "the redirect was followed"
    );
}

#[test]
fn a_refused_query_is_shown_capped_and_escaped() {
    let message = format!("{EVIL}{}", "x".repeat(100_000));
    let api = query_api(move |_| {
        Answer::Body(
            400,
            json!({"status": "error", "errorType": "bad_data", "error": message})
                .to_string()
                .into_bytes(),
        )
    });
    let out = fleet(&format!("http://127.0.0.1:{}", api.port), &[]);
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    let err = stderr(&out);
    assert_clean("the refusal", &err);
    assert!(err.contains("bad_data"), "{err}");
    assert!(err.len() < 8192, "{} bytes of error", err.len());
    assert!(err.contains('…'), "the cut is not marked: {err}");
}

// ---------------------------------------------------------------------------------------------
// Bounded reads

#[test]
fn an_endless_query_answer_is_refused_at_its_cap() {
    let api = query_api(|_| Answer::Endless { bytes: 300 << 20 });
    let started = Instant::now();
    let out = fleet(
        &format!("http://alice:{PASSWORD}@127.0.0.1:{}", api.port),
        &[],
    );
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("64 MiB"), "the cap is not named: {err}");
    assert!(
        err.contains(&format!("http://127.0.0.1:{}", api.port)),
        "the URL is not named: {err}"
    );
    assert_no_password("the refusal", &out);
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

/// `gpuslack run --config FILE` on a replay, killed if it runs past 10 s.
fn run_with_config(config: &str) -> (Option<i32>, String, Duration) {
    let fixture = repo("tests/fixtures/h200-health/samples.csv");
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(["run", "--config", config, "--replay"])
        .arg(&fixture)
        .args(["--speed", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpuslack starts");
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return (status.code(), err, started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("--config {config} still reading after 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_config_file_past_its_cap_is_refused_quickly_naming_the_cap() {
    let (code, err, took) = run_with_config("/dev/zero");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("/dev/zero: is a character device, not a regular file"),
        "the file is not named: {err}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // A regular file of 2 MiB of comments: refused the same way, before it is parsed.
    let dir = temp_dir("hostile-config");
    let big = dir.join("big.toml");
    std::fs::write(&big, "# padding\n".repeat(210_000)).expect("write");
    let (code, err, _) = run_with_config(&big.display().to_string());
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("1 MiB"), "{err}");
    // One just under the cap is read.
    let fine = dir.join("fine.toml");
    std::fs::write(&fine, "# padding\n".repeat(100_000)).expect("write");
    let (code, err, _) = run_with_config(&fine.display().to_string());
    assert_eq!(code, Some(0), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Output files

/// A symbolic link at `dir/name` to a precious file; returns (link, victim).
fn planted_link(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let victim = dir.join(format!("victim-{name}"));
    std::fs::write(&victim, "precious").expect("write");
    let link = dir.join(name);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    (link, victim)
}

fn assert_refused(what: &str, out: &Output, link: &Path, victim: &Path) {
    assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(out));
    assert!(
        stderr(out).contains(&format!("{}: is a symbolic link", link.display())),
        "{what}: {}",
        stderr(out)
    );
    assert_eq!(
        std::fs::read_to_string(victim).expect("read"),
        "precious",
        "{what} wrote through the link"
    );
}

#[test]
fn no_command_writes_through_a_symbolic_link() {
    let dir = temp_dir("hostile-links");
    let trace = repo("tests/fixtures/h200-health/samples.csv")
        .display()
        .to_string();

    let (link, victim) = planted_link(&dir, "report.html");
    let out = gpuslack(
        &[
            "diagnose",
            "--trace",
            &trace,
            "--html",
            &link.display().to_string(),
        ],
        &[],
    );
    assert_refused("diagnose --html", &out, &link, &victim);

    let (link, victim) = planted_link(&dir, "converted.gstrace");
    let out = gpuslack(&["convert", &trace, &link.display().to_string()], &[]);
    assert_refused("convert's output", &out, &link, &victim);

    // The facts beside the output: the trace is written, the facts are not written through.
    let (facts, victim) = planted_link(&dir, "out.facts.json");
    let output = dir.join("out.gstrace");
    let out = gpuslack(&["convert", &trace, &output.display().to_string()], &[]);
    assert_refused("convert's facts", &out, &facts, &victim);

    // `record` refuses before it looks for a GPU (none here).
    let (link, victim) = planted_link(&dir, "rec.csv");
    let out = gpuslack(
        &[
            "record",
            "--out",
            &link.display().to_string(),
            "--seconds",
            "1",
        ],
        &[],
    );
    assert_refused("record --out", &out, &link, &victim);
    let (facts, victim) = planted_link(&dir, "rec2.facts.json");
    let out = gpuslack(
        &[
            "record",
            "--out",
            &dir.join("rec2.csv").display().to_string(),
            "--seconds",
            "1",
        ],
        &[],
    );
    assert_refused("record's facts", &out, &facts, &victim);

    let api = query_api(hostile_answer);
    let (link, victim) = planted_link(&dir, "job.html");
    let out = fleet(
        &format!("http://127.0.0.1:{}", api.port),
        &["job", "slurm:1", "--html", &link.display().to_string()],
    );
    assert_refused("fleet job --html", &out, &link, &victim);
}
