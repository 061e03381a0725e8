//! The docs held to the tree and to the binary (issue #42): each kind of claim that drifted once
//! is checked here, so that it cannot drift silently again.
//!
//! - CONTRIBUTING's recipes name every file that names every class, or every exported metric:
//!   a recipe that misses a file fails;
//! - the README's "Using it" shows every command, and each flag it quotes is one the command
//!   takes (`--help`); a default quoted in prose ("--min-overall, default 95%") is the flag's;
//! - counts quoted from the tree (the symbol order's functions, `Metric::ALL`) are the tree's;
//! - docs/OUTPUT.md lists each exit code once;
//! - the README's "What the tests need" names what scripts/test.sh installs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpuslack_receiver::diagnosis::Class;
use gpuslack_receiver::export::catalogue;
use gpuslack_receiver::sample::Metric;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuslack"))
        .args(args)
        .arg("--help")
        .output()
        .expect("gpuslack runs");
    assert!(out.status.success(), "{args:?} --help");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of a Markdown section: from its heading to the next heading of its level or above.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let level = heading.chars().take_while(|c| *c == '#').count();
    let body = &doc[start + heading.len()..];
    let mut end = body.len();
    let mut offset = 0;
    let mut fenced = false;
    for line in body.split_inclusive('\n') {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !fenced && hashes > 0 && hashes <= level && line[hashes..].starts_with(' ') {
            end = offset;
            break;
        }
        offset += line.len();
    }
    &body[..end]
}

/// Whether `word` occurs in `text` as a whole word (not inside `idle_held` for `idle`).
fn has_word(text: &str, word: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(word).any(|(i, _)| {
        !part(text[..i].chars().next_back()) && !part(text[i + word.len()..].chars().next())
    })
}

/// The repository's text files a recipe could have to touch: sources, docs, deployment files
/// and scripts; not the fixtures, the recorded validation logs or the build.
fn text_files() -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .expect("under the root")
                .display()
                .to_string();
            let skip = rel.starts_with('.')
                || rel.starts_with("target")
                || rel == "tests/fixtures"
                || rel == "docs/validation";
            if skip {
                continue;
            }
            if path.is_dir() {
                walk(&path, root, out);
            } else if ["rs", "md", "json", "yml", "yaml", "py", "sh", "toml"]
                .iter()
                .any(|e| path.extension().is_some_and(|x| x == *e))
            {
                out.push(rel);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo(), &repo(), &mut files);
    files.sort();
    files
}

/// Files that name every one of `names` (by any of the spellings `spell` gives), apart from
/// CONTRIBUTING.md and this test.
fn files_naming_all(names: &[Vec<String>]) -> Vec<String> {
    text_files()
        .into_iter()
        .filter(|f| f != "CONTRIBUTING.md" && f != "tests/docs.rs")
        .filter(|f| {
            let Ok(text) = std::fs::read_to_string(repo().join(f)) else {
                return false;
            };
            names
                .iter()
                .all(|spellings| spellings.iter().any(|s| has_word(&text, s)))
        })
        .collect()
}

#[test]
fn the_new_class_recipe_names_every_file_that_names_every_class() {
    let contributing = read("CONTRIBUTING.md");
    let recipe = section(&contributing, "## A new diagnosis class");
    // A class as the outputs spell it (`launch_bound`) or as the code does (`Class::LaunchBound`).
    let names: Vec<Vec<String>> = Class::ALL
        .iter()
        .map(|c| vec![c.as_str().to_string(), format!("Class::{c:?}")])
        .collect();
    let files = files_naming_all(&names);
    for must in [
        "otel-receiver/src/diagnosis/class.rs",
        "docs/output.schema.json",
        "deploy/prometheus/gpuslack-jobs.yml",
        "deploy/datadog/monitors.json",
    ] {
        assert!(
            files.contains(&must.to_string()),
            "{must} names every class: {files:?}"
        );
    }
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !recipe.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "CONTRIBUTING.md's \"A new diagnosis class\" misses files that name every class: {missing:?}"
    );
}

#[test]
fn the_new_metric_recipe_names_every_file_that_names_every_metric() {
    let contributing = read("CONTRIBUTING.md");
    let recipe = section(&contributing, "## A new exported metric");
    // A metric as OTLP names it and as Prometheus does.
    let names: Vec<Vec<String>> = catalogue::ALL
        .iter()
        .map(|m| vec![m.name.to_string(), m.name.replace('.', "_")])
        .collect();
    let files = files_naming_all(&names);
    assert!(
        files.contains(&"otel-receiver/src/export/catalogue.rs".to_string()),
        "{files:?}"
    );
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !recipe.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "CONTRIBUTING.md's \"A new exported metric\" misses files that name every metric: {missing:?}"
    );
}

#[test]
fn a_recipe_that_misses_a_file_fails() {
    // The check above, on a recipe that leaves out the schema: it must say so.
    let recipe = "1. `otel-receiver/src/diagnosis/class.rs`";
    let files = [
        "otel-receiver/src/diagnosis/class.rs",
        "docs/output.schema.json",
    ];
    let missing: Vec<&&str> = files.iter().filter(|f| !recipe.contains(**f)).collect();
    assert_eq!(missing, [&"docs/output.schema.json"]);
    assert!(has_word("a `launch_bound` b", "launch_bound"));
    assert!(!has_word("idle_held", "idle"));
}

/// The `gpuslack …` commands of the README's "Using it", each with its continuation lines.
fn using_it_commands() -> Vec<String> {
    let readme = read("README.md");
    let using = section(&readme, "## Using it");
    let mut commands: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in using.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            continue;
        }
        if line.starts_with("gpuslack ") {
            commands.push(line.to_string());
        } else if line.starts_with(' ') && !line.trim_start().starts_with('#') {
            if let Some(last) = commands.last_mut() {
                last.push(' ');
                last.push_str(line.trim());
            }
        }
    }
    commands
}

/// The subcommands a `--help` lists under "Commands:".
fn subcommands(help: &str) -> Vec<String> {
    help.split("Commands:")
        .nth(1)
        .map(|rest| {
            rest.lines()
                .skip(1)
                .take_while(|l| l.starts_with("  "))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|c| *c != "help")
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn flags_in(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for (i, _) in text.match_indices("--") {
        let name: String = text[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let before = text[..i].chars().next_back();
        if !name.is_empty() && before.is_none_or(|c| !c.is_ascii_alphanumeric()) {
            flags.insert(format!("--{name}"));
        }
    }
    flags
}

#[test]
fn using_it_shows_every_command_with_flags_it_takes() {
    let commands = using_it_commands();
    let shown: BTreeSet<String> = commands
        .iter()
        .filter_map(|c| c.split_whitespace().nth(1).map(str::to_string))
        .collect();
    for sub in subcommands(&help(&[])) {
        assert!(
            shown.contains(&sub),
            "README's \"Using it\" does not show `gpuslack {sub}`"
        );
    }
    for command in &commands {
        let words: Vec<&str> = command.split_whitespace().collect();
        let sub = words[1];
        // A nested command (`fleet job`) takes its parent's flags and its own.
        let mut path = vec![sub];
        let nested = subcommands(&help(&[sub]));
        if let Some(inner) = words.iter().find(|w| nested.iter().any(|n| n == *w)) {
            path.push(inner);
        }
        let mut known = flags_in(&help(&path));
        known.extend(flags_in(&help(&[sub])));
        for flag in flags_in(command) {
            assert!(
                known.contains(&flag),
                "README quotes `{flag}` for `gpuslack {}`, which does not take it",
                path.join(" ")
            );
        }
    }
}

/// Issue #47: the README's `run` synopsis names every flag `run --help` lists (the metric set's
/// `--metrics`, `--metrics-include` and `--metrics-exclude` were missing), `-v` aside.
#[test]
fn the_run_synopsis_names_every_flag_run_takes() {
    let commands = using_it_commands();
    let run = commands
        .iter()
        .find(|c| c.starts_with("gpuslack run "))
        .expect("README shows `gpuslack run`");
    let shown = flags_in(run);
    // The options' own lines ("  -v, --verbose...", "      --replay <TRACE>"), not the flags
    // their descriptions mention.
    let help = help(&["run"]);
    let options: BTreeSet<String> = help
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| {
            flags_in(l.split("  ").next().unwrap_or(l))
                .into_iter()
                .next()
        })
        .collect();
    assert!(options.len() > 30, "{options:?}");
    for flag in options {
        if ["--help", "--verbose"].contains(&flag.as_str()) {
            continue;
        }
        assert!(
            shown.contains(&flag),
            "README's `gpuslack run` synopsis lacks `{flag}`: {run}"
        );
    }
    for flag in ["--metrics", "--metrics-include", "--metrics-exclude"] {
        assert!(shown.contains(flag), "{flag}: {run}");
    }
}

#[test]
fn defaults_quoted_in_prose_are_the_flags_defaults() {
    let readme = read("README.md");
    let mut checked = 0;
    // "--min-overall, default 95%": a flag, then "default X" before the next flag.
    for (i, _) in readme.match_indices(", default ") {
        let before = &readme[..i];
        let Some(at) = before.rfind("--") else {
            continue;
        };
        let flag: String = before[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let value: String = readme[i + ", default ".len()..]
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != ',' && *c != ';' && *c != ')')
            .collect();
        let shown = format!("[default: {value}]");
        let holds = subcommands(&help(&[])).iter().any(|sub| {
            help(&[sub])
                .lines()
                .any(|l| l.contains(&format!("{flag} ")) && l.contains(&shown))
        });
        assert!(
            holds,
            "README says {flag} defaults to {value}; no --help agrees"
        );
        checked += 1;
    }
    assert!(checked >= 2, "the score defaults are quoted: {checked}");
}

/// "4610" as prose writes it: "4,610".
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn counts_quoted_from_the_tree_are_the_trees() {
    // The symbol order: every name, and each traced group's.
    let order = read("link/symbol-order.txt");
    let mut groups: Vec<(String, usize)> = Vec::new();
    let mut names = 0;
    for line in order.lines() {
        if let Some(group) = line.strip_prefix("# group: ") {
            groups.push((group.to_string(), 0));
        } else if !line.trim().is_empty() && !line.starts_with('#') {
            names += 1;
            if let Some(g) = groups.last_mut() {
                g.1 += 1;
            }
        }
    }
    let architecture = read("docs/ARCHITECTURE.md");
    assert!(
        architecture.contains(&format!("the {} functions", thousands(names))),
        "docs/ARCHITECTURE.md should quote the {} functions of link/symbol-order.txt",
        thousands(names)
    );
    for (group, count) in groups.iter().take(2) {
        assert!(
            architecture.contains(&thousands(*count)),
            "docs/ARCHITECTURE.md should quote group {group}'s {count} functions"
        );
    }
    // The metrics a sample can hold.
    let contributing = read("CONTRIBUTING.md");
    assert!(
        contributing.contains(&format!("`ALL` holds {} today", Metric::COUNT)),
        "CONTRIBUTING.md should say Metric::ALL holds {}",
        Metric::COUNT
    );
}

#[test]
fn each_exit_code_is_listed_once() {
    let output = read("docs/OUTPUT.md");
    let table = section(&output, "## Exit codes");
    let mut seen = BTreeSet::new();
    for line in table.lines() {
        let Some(code) = line
            .strip_prefix("| ")
            .and_then(|l| l.split(' ').next())
            .filter(|c| c.parse::<u8>().is_ok())
        else {
            continue;
        };
        assert!(
            seen.insert(code.to_string()),
            "exit code {code} listed twice"
        );
    }
    for code in ["0", "1", "2", "3", "69", "75", "76", "126", "127"] {
        assert!(seen.contains(code), "exit code {code} not listed");
    }
    // 69 means "no GPU"; `fleet`, which needs none, never says it (issue #47).
    let no_gpu = table
        .lines()
        .find(|l| l.starts_with("| 69 |"))
        .expect("69 listed");
    assert!(!no_gpu.contains("fleet"), "{no_gpu}");
    let readme = read("README.md");
    assert!(
        readme.contains("75 nothing answered\nat `--prometheus`"),
        "README lists fleet's exit codes apart from the GPU ones"
    );
}

/// Issue #47: DEPLOY.md's memory limit is the DaemonSet's, and what it says `run --usage`
/// prints is what the live source prints.
#[test]
fn deploy_quotes_the_daemonset_limit_and_the_usage_lines() {
    let yaml = read("deploy/kubernetes/gpuslack.yaml");
    let limit_mi: u32 = yaml
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("limits: {")?
                .split("memory: ")
                .nth(1)?
                .split("Mi")
                .next()?
                .trim()
                .parse()
                .ok()
        })
        .expect("the DaemonSet's memory limit");
    assert_eq!(limit_mi, 192);
    let deploy = read("docs/DEPLOY.md");
    let flat = deploy.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(&format!("a {limit_mi} MiB limit")),
        "DEPLOY.md does not state the DaemonSet's {limit_mi} MiB limit"
    );
    assert!(!flat.contains("128 MiB limit"));
    let ticks = read("otel-receiver/src/source/live/ticks.rs");
    for quoted in [
        "cadence relaxed_ms fast_ms hold_s relaxed_ticks fast_ticks fast_share_of_time",
        "cadence_triggers",
    ] {
        assert!(flat.contains(quoted), "DEPLOY.md: {quoted}");
        assert!(ticks.contains(quoted), "ticks.rs: {quoted}");
    }
}

#[test]
fn what_the_tests_need_names_what_the_script_installs() {
    let script = read("scripts/test.sh");
    let readme = read("README.md");
    let start = readme
        .find("What the tests need")
        .expect("README: What the tests need");
    let end = readme[start..]
        .find("It works from any target")
        .map_or(readme.len(), |e| start + e);
    let needs = readme[start..end].to_lowercase();
    let mut packages = Vec::new();
    // apt: the words on the line after each `install -y … \`.
    let lines: Vec<&str> = script.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.contains("install -y") && line.trim_end().ends_with('\\') {
            if let Some(next) = lines.get(i + 1) {
                packages.extend(
                    next.split_whitespace()
                        .take_while(|w| !w.starts_with('>'))
                        .map(str::to_string),
                );
            }
        }
    }
    // pip: `name==version` anywhere in the script.
    for word in script.split_whitespace() {
        if let Some((name, _)) = word.split_once("==") {
            packages.push(name.to_string());
        }
    }
    assert!(packages.len() >= 8, "{packages:?}");
    // How the README words a package where its name is not its word.
    fn said_as(p: &str) -> &str {
        match p {
            "systemd" => "systemd-analyze",
            "grpcio-tools" => "grpcio and its tools",
            "nvidia-cuda-nvrtc" | "nvidia-cuda-nvrtc-cu12" => "nvrtc",
            other => other,
        }
    }
    for p in &packages {
        assert!(
            needs.contains(said_as(p)),
            "README's \"What the tests need\" does not name {p}, which scripts/test.sh installs"
        );
    }
}

/// The ids of the classes whose [`Rank`] is `rank`, in the table's order.
fn ids_of(rank: gpuslack_receiver::diagnosis::Rank) -> Vec<&'static str> {
    gpuslack_receiver::diagnosis::CLASSES
        .iter()
        .filter(|c| c.rank == rank)
        .map(|c| c.id)
        .collect()
}

/// The classes named between `open` and `close` after `after` in `text`, split on `sep`.
fn listed<'a>(text: &'a str, after: &str, open: &str, close: &str, sep: char) -> BTreeSet<&'a str> {
    let at = text.find(after).unwrap_or_else(|| panic!("no {after:?}"));
    let rest = &text[at + after.len()..];
    let start = rest.find(open).expect("open") + open.len();
    let end = start + rest[start..].find(close).expect("close");
    rest[start..end].split(sep).map(str::trim).collect()
}

#[test]
fn every_class_list_is_the_class_table() {
    // Issue #46: one row per class (`diagnosis::CLASSES`); the schema, the deploy rules and
    // the docs' lists of classes are checked against it, so a new class that misses one fails
    // here, not in a reader's dashboard.
    use gpuslack_receiver::diagnosis::{Rank, CLASSES};
    for (i, info) in CLASSES.iter().enumerate() {
        assert_eq!(
            info.class,
            Class::ALL[i],
            "CLASSES is in Class::ALL's order"
        );
        assert_eq!(info.class.as_str(), info.id);
    }
    let ids: Vec<&str> = CLASSES.iter().map(|c| c.id).collect();
    // The JSON schema's enum, in order.
    let schema: serde_json::Value =
        serde_json::from_str(&read("docs/output.schema.json")).expect("schema");
    let enumerated: Vec<&str> = schema["$defs"]["class"]["enum"]
        .as_array()
        .expect("class enum")
        .iter()
        .map(|v| v.as_str().expect("a name"))
        .collect();
    assert_eq!(enumerated, ids, "docs/output.schema.json's class enum");
    // The README's table, docs/OUTPUT.md's list and docs/DIAGNOSIS.md name every class.
    for file in ["README.md", "docs/OUTPUT.md", "docs/DIAGNOSIS.md"] {
        let text = read(file);
        for id in &ids {
            assert!(
                has_word(&text, &format!("`{id}`")),
                "{file} does not name `{id}`"
            );
        }
    }
    // The job rules: working and waiting as the table's ranks say, in both rule files and the
    // Datadog monitor; the slack ratio leaves out exactly the healthy working classes, and
    // every other class has its remedy row.
    let working: BTreeSet<&str> = ids_of(Rank::Working).into_iter().collect();
    let waiting: BTreeSet<&str> = ids_of(Rank::Waiting).into_iter().collect();
    for file in [
        "deploy/prometheus/gpuslack-jobs.yml",
        "deploy/kubernetes/prometheusrule.yaml",
    ] {
        let text = read(file);
        let rule = |name: &str| listed(&text, name, "gpuslack_diagnosis_class=~\"", "\"", '|');
        assert_eq!(rule("gpuslack:job_rank:working"), working, "{file}");
        assert_eq!(rule("gpuslack:job_rank:waiting"), waiting, "{file}");
        let healthy_work: BTreeSet<&str> = CLASSES
            .iter()
            .filter(|c| c.healthy && c.rank == Rank::Working)
            .map(|c| c.id)
            .collect();
        let slack = listed(
            &text,
            "gpuslack_job:slack:ratio1h",
            "gpuslack_diagnosis_class!~\"",
            "\"",
            '|',
        );
        assert_eq!(slack, healthy_work, "{file}: the slack ratio");
        let remedies: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.split("gpuslack_diagnosis_class: ").nth(1))
            .filter_map(|l| l.split(',').next())
            .collect();
        let expected: BTreeSet<&str> = ids
            .iter()
            .copied()
            .filter(|id| !healthy_work.contains(id))
            .collect();
        assert_eq!(remedies, expected, "{file}: the remedy rows");
    }
    let monitors = read("deploy/datadog/monitors.json");
    let waiting_dd = listed(&monitors, "gpuslack.diagnosis.class IN", "(", ")", ',');
    assert_eq!(waiting_dd, waiting, "deploy/datadog/monitors.json: waiting");
    let after_waiting = &monitors[monitors.find("IN (hung,sync_wait)").expect("waiting") + 5..];
    let working_dd = listed(after_waiting, "gpuslack.diagnosis.class IN", "(", ")", ',');
    assert_eq!(working_dd, working, "deploy/datadog/monitors.json: working");
    let deploy = read("docs/DEPLOY.md");
    let row = deploy
        .lines()
        .find(|l| l.starts_with("| `gpuslack:job_rank:waiting`"))
        .expect("docs/DEPLOY.md's job_rank row");
    for id in working.iter().chain(&waiting) {
        assert!(
            row.contains(&format!("`{id}`")),
            "docs/DEPLOY.md's job_rank row lacks {id}"
        );
    }
}
