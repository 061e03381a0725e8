//! What the integration tests share: the binary, the fixtures, free ports, and the real servers
//! they start (Rotel, the header stub) as processes killed when a test ends.
#![allow(dead_code)] // each test file uses its own part

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn tool(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests through scripts/test.sh, which installs the collector, grpcio and Prometheus")
    })
}

/// The metric set the helpers' runs export unless a test names another: the whole table, whose
/// metrics the export and reliability tests check one by one (tests/series.rs, tests/fleet*.rs
/// and the deployment tests run the default, lean set).
pub const TESTS_METRIC_SET: (&str, &str) = ("GPUSLACK_METRICS", "full");

pub fn gpuslack(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuslack"));
    cmd.args(args);
    cmd.env(TESTS_METRIC_SET.0, TESTS_METRIC_SET.1);
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_SERVICE_NAME",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("gpuslack runs")
}

/// `gpuslack run --replay <two-GPU fixture>` with more arguments.
pub fn replay_run(args: &[&str], env: &[(&str, &str)]) -> Output {
    replay_run_of(&fixture(), args, env)
}

/// `gpuslack run --replay TRACE` with more arguments.
pub fn replay_run_of(trace: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut all = vec!["run", "--replay", trace];
    all.extend_from_slice(args);
    gpuslack(&all, env)
}

/// `gpuslack run --replay TRACE` at full speed serving Prometheus on `port`, staying up
/// `linger_s` after the trace ends; killed when the returned server is dropped.
pub fn serve_replay(trace: &str, port: u16, linger_s: u32, extra: &[&str]) -> Server {
    let agent = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(["run", "--replay", trace, "--speed", "0"])
        .args(["--linger-s", &linger_s.to_string()])
        .args(["--prometheus", &format!("127.0.0.1:{port}")])
        .args(extra)
        .env(TESTS_METRIC_SET.0, TESTS_METRIC_SET.1)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent starts");
    let server = Server(agent);
    wait_for_port(port, "gpuslack's Prometheus endpoint");
    server
}

/// Runs gpuslack with `args`, in this process's environment, and waits for it.
pub fn command(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(args)
        .output()
        .expect("gpuslack runs")
}

/// What a run wrote on stdout, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What a run wrote on stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A recorded fixture's folder (`tests/fixtures/NAME`).
pub fn fixture_dir(name: &str) -> PathBuf {
    repo("tests/fixtures").join(name)
}

/// A recorded fixture's trace (`tests/fixtures/NAME/samples.csv`), as an argument.
pub fn fixture_samples(name: &str) -> String {
    fixture_dir(name).join("samples.csv").display().to_string()
}

/// A path inside the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

pub fn fixture() -> String {
    repo("tests/fixtures/h200x2-scenarios/samples.csv")
        .display()
        .to_string()
}

/// A port nothing listens on, and one this test binary has not been given before: a port is
/// free again once its probe closes, and the kernel handed the same one to two calls in a row
/// (a stub's HTTP and gRPC ports, or a "closed" endpoint and a stub's): one server then failed
/// to bind and the test read "connection refused" where it expected a 503.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

pub fn wait_for_port(port: u16, what: &str) {
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what} did not start listening on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuslack-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A server process killed when the test ends, pass or fail.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Rotel on two fresh ports with the recording processor; returns (server, grpc, http, output).
pub fn start_rotel(dir: &Path) -> (Server, u16, u16, PathBuf) {
    let (grpc, http) = (free_port(), free_port());
    let (server, out) = start_rotel_on(dir, grpc, http);
    (server, grpc, http, out)
}

/// Rotel on the given ports, appending what arrives to `dir`'s output (a restarted collector
/// adds to what the first wrote); returns (server, output).
pub fn start_rotel_on(dir: &Path, grpc: u16, http: u16) -> (Server, PathBuf) {
    let out = dir.join("collected.jsonl");
    let processor = repo("tests/support/rotel_processor.py");
    let child = Command::new(tool("GPUSLACK_ROTEL"))
        .args(["start", "--exporter", "blackhole"])
        .args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{grpc}")])
        .args(["--otlp-http-endpoint", &format!("127.0.0.1:{http}")])
        .args([
            "--otlp-with-metrics-processor",
            &processor.display().to_string(),
        ])
        .args([
            "--otlp-with-logs-processor",
            &processor.display().to_string(),
        ])
        .args(["--batch-timeout", "50ms"])
        .args(["--pid-file", &dir.join("rotel.pid").display().to_string()])
        .args(["--log-file", &dir.join("rotel.log").display().to_string()])
        .env("GPUSLACK_COLLECTED", &out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("rotel starts");
    let server = Server(child);
    wait_for_port(grpc, "rotel (gRPC)");
    wait_for_port(http, "rotel (HTTP)");
    (server, out)
}

pub fn read_collected(path: &Path, want_logs: bool) -> Vec<Value> {
    // The collector batches for 50 ms; give it a moment after the agent exits.
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let records: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let has_logs = records.iter().any(|r| r["signal"] == "log");
        if (!records.is_empty() && (has_logs || !want_logs))
            || started.elapsed() > Duration::from_secs(10)
        {
            return records;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn start_stub(dir: &Path, status: u16) -> (Server, u16, u16, PathBuf) {
    start_stub_with(dir, status, None)
}

pub fn start_stub_with(
    dir: &Path,
    status: u16,
    tls: Option<(&Path, &Path)>,
) -> (Server, u16, u16, PathBuf) {
    let (http, grpc) = (free_port(), free_port());
    let out = dir.join("requests.jsonl");
    let script = repo("tests/support/header_stub.py");
    let mut cmd = Command::new(tool("GPUSLACK_PYTHON"));
    cmd.arg(script)
        .arg(&out)
        .arg(http.to_string())
        .arg(grpc.to_string())
        .arg(status.to_string());
    if let Some((cert, key)) = tls {
        cmd.arg(cert).arg(key);
    }
    let child = cmd.stdout(Stdio::null()).spawn().expect("stub starts");
    let server = Server(child);
    wait_for_port(http, "header stub (HTTP)");
    wait_for_port(grpc, "header stub (gRPC)");
    (server, http, grpc, out)
}

pub fn requests(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A Prometheus (Debian's, GPUSLACK_PROMETHEUS) scraping `127.0.0.1:target` every second, and
/// the port its HTTP API listens on.
pub fn start_prometheus(dir: &Path, target: u16) -> (Server, u16) {
    start_prometheus_with(
        dir,
        &format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gpuslack\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"),
    )
}

/// A Prometheus with `config` as its `prometheus.yml` in `dir`, on a free port; the port.
pub fn start_prometheus_with(dir: &Path, config: &str) -> (Server, u16) {
    std::fs::write(dir.join("prometheus.yml"), config).expect("config");
    let port = free_port();
    (run_prometheus(dir, port, &[]), port)
}

/// A Prometheus reading `dir/prometheus.yml`, its TSDB in `dir/data`, listening on `port`
/// (with `extra` arguments), once it answers.
pub fn run_prometheus(dir: &Path, port: u16, extra: &[&str]) -> Server {
    let server = Server(
        Command::new(tool("GPUSLACK_PROMETHEUS"))
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .args(extra)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );
    wait_for_port(port, "prometheus");
    server
}

/// Debian's promtool, beside the Prometheus server.
pub fn promtool() -> String {
    Path::new(&tool("GPUSLACK_PROMETHEUS"))
        .with_file_name("promtool")
        .display()
        .to_string()
}

/// Prometheus' answer to an instant query: `status` is "success" or "error" (with `error`).
pub fn prometheus_query(port: u16, query: &str) -> serde_json::Value {
    let out = Command::new("curl")
        .args([
            "-s",
            "--get",
            "--data-urlencode",
            &format!("query={query}"),
            &format!("http://127.0.0.1:{port}/api/v1/query"),
        ])
        .output()
        .expect("curl");
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// The tests' kubelet PodResources server (tests/support/podresources_server.py, grpcio, the
/// kubelet's v1 proto) on a Unix socket in `dir`, answering with `pods` (a
/// ListPodResourcesResponse in the proto's JSON form); returns (server, socket, calls file).
pub fn start_podresources(dir: &Path, pods: &Value) -> (Server, PathBuf, PathBuf) {
    let socket = dir.join("kubelet.sock");
    let pods_file = dir.join("pods.json");
    let calls = dir.join("kubelet-calls.jsonl");
    std::fs::write(&pods_file, pods.to_string()).expect("pods file");
    let child = Command::new(tool("GPUSLACK_PYTHON"))
        .arg(repo("tests/support/podresources_server.py"))
        .args([&socket, &pods_file, &calls])
        .stdout(Stdio::null())
        .spawn()
        .expect("PodResources server starts");
    let server = Server(child);
    let started = Instant::now();
    while !socket.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the PodResources server never made {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, socket, calls)
}

/// `fixture` with a `processes` column naming Slurm job `job` on every sample: the recording
/// posing as one node of that job.
pub fn as_slurm_job(fixture: &str, job: &str, dir: &Path, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(repo("tests/fixtures").join(fixture).join("samples.csv"))
        .expect("fixture");
    let mut lines = text.lines();
    let header = lines.next().expect("header");
    assert!(
        !header.contains("processes"),
        "{fixture} names its own owners"
    );
    let gpu_col = header
        .split(',')
        .position(|c| c == "gpu")
        .expect("gpu column");
    let mut out = format!("{header},processes\n");
    for line in lines {
        let gpu = line.split(',').nth(gpu_col).unwrap_or("0");
        out.push_str(&format!(
            "{line},\"[{{\"\"pid\"\":{},\"\"slurm_job\"\":\"\"{job}\"\"}}]\"\n",
            1000 + gpu.parse::<u32>().unwrap_or(0)
        ));
    }
    let path = dir.join(name);
    std::fs::write(&path, out).expect("trace");
    path
}

/// An agent replaying `trace` at full speed as host `host` (`host.name`, the default metric
/// set), serving /metrics on `port`: one node of a simulated fleet.
pub fn node_agent(trace: &Path, host: &str, port: u16) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(["run", "--replay"])
        .arg(trace)
        .args(["--speed", "0", "--linger-s", "120"])
        .args(["--prometheus", &format!("127.0.0.1:{port}")])
        .env("OTEL_RESOURCE_ATTRIBUTES", format!("host.name={host}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent starts");
    let server = Server(child);
    wait_for_port(port, "an agent's /metrics");
    server
}

/// A scrape configuration for Prometheus and VictoriaMetrics alike: every target each second,
/// under the job name the rules select (`gpuslack`).
pub fn scrape_config(targets: &[u16]) -> String {
    let list: Vec<String> = targets.iter().map(|t| format!("'127.0.0.1:{t}'")).collect();
    format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gpuslack\n    static_configs:\n      - targets: [{}]\n",
        list.join(", ")
    )
}

/// The first value of an instant query's answer, if any.
pub fn query_scalar(port: u16, query: &str) -> Option<f64> {
    let answer = prometheus_query(port, query);
    answer["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
}

/// Waits until every target is up and the GPU-seconds summed over all of them have stood still
/// for 3 scrapes: the replays are done and the store behind `port` holds their final counters.
pub fn wait_for_final_counters(port: u16, targets: usize) {
    let started = Instant::now();
    let mut last = (None, 0);
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the counters never settled"
        );
        std::thread::sleep(Duration::from_secs(1));
        let up = query_scalar(port, "count(up == 1)").unwrap_or(0.0);
        let sum = query_scalar(port, "sum(gpuslack_diagnosis_time_seconds_total)");
        if up as usize != targets || sum.is_none() {
            continue;
        }
        if last.0 == sum {
            last.1 += 1;
            if last.1 >= 3 {
                return;
            }
        } else {
            last = (sum, 0);
        }
    }
}

/// `gpuslack ARGS` that must succeed, its stdout parsed as JSON.
pub fn gpuslack_json(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(args)
        .output()
        .expect("gpuslack runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// VictoriaMetrics (Debian's `victoria-metrics`, GPUSLACK_VICTORIA_METRICS) scraping as
/// `config` (a Prometheus scrape configuration) says, its data in `dir/victoria-metrics`; the
/// server and the port of its Prometheus-compatible query API. Points are visible to queries
/// 1 s after they arrive rather than its default 30 s (`-search.latencyOffset`, docs/DEPLOY.md),
/// so that a test need not wait half a minute.
pub fn start_victoria_metrics(dir: &Path, config: &str) -> (Server, u16) {
    let file = dir.join("victoria-metrics-scrape.yml");
    std::fs::write(&file, config).expect("config");
    let port = free_port();
    let server = Server(
        Command::new(tool("GPUSLACK_VICTORIA_METRICS"))
            .arg(format!(
                "-storageDataPath={}",
                dir.join("victoria-metrics").display()
            ))
            .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            .arg(format!("-promscrape.config={}", file.display()))
            .arg("-search.latencyOffset=1s")
            .arg("-loggerLevel=ERROR")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("victoria-metrics starts"),
    );
    wait_for_port(port, "victoria-metrics");
    (server, port)
}

/// Debian's vmalert, which evaluates rules for VictoriaMetrics (in the same package).
pub fn vmalert() -> String {
    Path::new(&tool("GPUSLACK_VICTORIA_METRICS"))
        .with_file_name("vmalert")
        .display()
        .to_string()
}

/// `/metrics` of the agent on `port`, as text.
pub fn scrape(port: u16) -> String {
    let out = Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `/metrics` of a replaying agent on `port` once its replay is done: the windows it produced
/// stand still for `still_for` scrapes in a row, 300 ms apart (within 30 s).
pub fn scrape_settled(port: u16, still_for: u32) -> String {
    let started = Instant::now();
    let (mut last, mut still) = (String::new(), 0);
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the replay never ended"
        );
        std::thread::sleep(Duration::from_millis(300));
        let text = scrape(port);
        let produced: String = text
            .lines()
            .filter(|l| l.starts_with("gpuslack_agent_windows_total") && l.contains("produced"))
            .collect();
        if !produced.is_empty() && produced == last {
            still += 1;
            if still >= still_for {
                return text;
            }
        } else {
            (last, still) = (produced, 0);
        }
    }
}

/// Asserts that `promtool check metrics`, Prometheus' strict parser, takes `text` without a
/// word on either stream.
pub fn assert_promtool_accepts(text: &str) {
    use std::io::Write as _;
    let mut check = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("promtool reads");
    let checked = check.wait_with_output().expect("promtool ends");
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}
