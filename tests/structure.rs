//! The building's rules, checked on its source rather than trusted to review:
//!
//! - imports point one way: among the modules of one parent (the top-level modules of a crate,
//!   the files of one folder), no module imports from a module that imports it, directly or
//!   round a longer circle; the exceptions still standing are listed, with why;
//! - docs/ARCHITECTURE.md names every source file of every crate, and every benchmark and
//!   example file.
//!
//! Imports are read from the `use` declarations and the `crate::`/`super::`/`self::` paths
//! of each file, comments left out. A name the crate root re-exports (`crate::Sample`) counts
//! as an import from the module it comes from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates' source folders, from the repository root.
const CRATES: [&str; 4] = [
    "src",
    "otel-receiver/src",
    "calibration/src",
    "bench-kernels/src",
];

/// Import circles that stand for now, each as (crate folder, one module, the other): the test
/// fails on any other circle, and on an exception that no longer exists.
const CIRCLES_ALLOWED: &[(&str, &str, &str)] = &[];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The module path of a file under a crate's source folder: `lib.rs` → [], `export/mod.rs` →
/// [export], `export/state.rs` → [export, state].
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod")) {
        parts.pop();
    }
    if parts.len() == 1 && matches!(parts[0].as_str(), "lib" | "main") {
        parts.clear();
    }
    parts
}

/// The source without comments (line comments and doc comments; block comments are rare and
/// hold no paths here) and without its unit tests (`#[cfg(test)] mod …`, at the end of a
/// file by convention): a test may reach anywhere without bending the building.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            // A `//` inside a string ("http://…") ends the line early: an import is never there.
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a use tree names, flattened: `a::{b, c::d}` → [a::b, a::c::d].
fn flatten_use(tree: &str) -> Vec<Vec<String>> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    flatten_into(&tree, &mut Vec::new(), &mut out);
    out
}

fn flatten_into(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(brace) = tree.find('{') else {
        let mut path = prefix.clone();
        path.extend(
            tree.split("::")
                .filter(|s| !s.is_empty())
                .map(|s| s.split(" as ").next().unwrap_or(s).to_string()),
        );
        out.push(path);
        return;
    };
    let head = &tree[..brace];
    let inner = &tree[brace + 1..tree.rfind('}').unwrap_or(tree.len())];
    let before = prefix.len();
    prefix.extend(
        head.split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    );
    // Split the inner list at top-level commas.
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                flatten_into(&inner[start..i], prefix, out);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < inner.len() {
        flatten_into(&inner[start..], prefix, out);
    }
    prefix.truncate(before);
}

/// Every path a file names: its use trees, and `crate::`, `super::`, `self::` paths in code.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let at_word = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric();
        let after = &rest[i + 4..];
        match after.find(';') {
            Some(end) if at_word => {
                out.extend(flatten_use(after[..end].trim_start_matches("pub ")));
                rest = &after[end..];
            }
            _ => rest = after,
        }
    }
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0 && {
                let b = code.as_bytes()[at - 1];
                b.is_ascii_alphanumeric() || b == b'_' || b == b':'
            } {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(
                path.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
            );
        }
    }
    out
}

/// One crate's module graph: module → (imported module → the file that imports it).
type Graph = BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>;

fn import_graph(src: &Path) -> Graph {
    let files = rust_files(src);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(src, f)).collect();
    // The crate root's re-exports: `pub use diagnosis::{Class, …}` makes `crate::Class` an
    // import from diagnosis.
    let mut root_names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for root in ["lib.rs", "main.rs"] {
        let Ok(text) = std::fs::read_to_string(src.join(root)) else {
            continue;
        };
        for path in paths_in(&code_of(&text)) {
            if path.len() >= 2 && modules.contains(&path[..1]) {
                if let Some(name) = path.last() {
                    root_names.insert(name.clone(), path[..path.len() - 1].to_vec());
                }
            }
        }
    }
    let mut graph = Graph::new();
    for file in &files {
        let here = module_of(src, file);
        let text = std::fs::read_to_string(file).expect("readable");
        let shown = file
            .strip_prefix(repo())
            .unwrap_or(file)
            .display()
            .to_string();
        for path in paths_in(&code_of(&text)) {
            let mut target: Vec<String> = match path.first().map(String::as_str) {
                Some("crate") => path[1..].to_vec(),
                Some("super") => {
                    let ups = path.iter().take_while(|s| *s == "super").count();
                    let mut base = here.clone();
                    base.truncate(here.len().saturating_sub(ups));
                    base.extend(path[ups..].iter().cloned());
                    base
                }
                Some("self") => here.iter().chain(&path[1..]).cloned().collect(),
                // A child module named without `self::` (`use class::Class` in a mod.rs).
                Some(first)
                    if modules.contains(&[here.clone(), vec![first.to_string()]].concat()) =>
                {
                    here.iter().chain(&path).cloned().collect()
                }
                _ => continue,
            };
            if target.len() == 1 {
                if let Some(module) = root_names.get(&target[0]) {
                    target = module.clone();
                }
            }
            // The longest prefix that is a module.
            while !target.is_empty() && !modules.contains(&target) {
                target.pop();
            }
            graph
                .entry(here.clone())
                .or_default()
                .entry(target)
                .or_insert_with(|| shown.clone());
        }
    }
    graph
}

/// The circles among the children of each parent: pairs (a, b) where a reaches b and b
/// reaches a, each with the files behind the two first steps.
fn circles(graph: &Graph) -> Vec<(String, String, String)> {
    // Edges between siblings: from a module to another under their closest common parent.
    let mut siblings: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
    for (from, targets) in graph {
        for (to, file) in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common >= from.len() || common >= to.len() {
                continue; // a module and its own descendant or ancestor
            }
            siblings
                .entry(from[..=common].to_vec())
                .or_default()
                .entry(to[..=common].to_vec())
                .or_insert_with(|| file.clone());
        }
    }
    let reaches = |a: &Vec<String>, b: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![a.clone()];
        while let Some(x) = stack.pop() {
            for y in siblings.get(&x).into_iter().flat_map(|t| t.keys()) {
                if y == b {
                    return true;
                }
                if seen.insert(y.clone()) {
                    stack.push(y.clone());
                }
            }
        }
        false
    };
    let mut out = Vec::new();
    for (from, targets) in &siblings {
        for (to, file) in targets {
            if from < to && reaches(to, from) {
                out.push((from.join("::"), to.join("::"), file.clone()));
            }
        }
    }
    out
}

#[test]
fn imports_point_one_way() {
    let mut found = Vec::new();
    for krate in CRATES {
        for (a, b, file) in circles(&import_graph(&repo().join(krate))) {
            found.push((krate, a, b, file));
        }
    }
    let unexpected: Vec<String> = found
        .iter()
        .filter(|(k, a, b, _)| !CIRCLES_ALLOWED.contains(&(*k, a.as_str(), b.as_str())))
        .map(|(k, a, b, file)| format!("{k}: {a} ↔ {b} (one step in {file})"))
        .collect();
    assert!(
        unexpected.is_empty(),
        "import circles: a module imports from one that imports it, directly or round a \
         longer circle; move what both need below both:\n{}",
        unexpected.join("\n")
    );
    for (k, a, b) in CIRCLES_ALLOWED {
        assert!(
            found
                .iter()
                .any(|(fk, fa, fb, _)| fk == k && fa == a && fb == b),
            "{k}: {a} ↔ {b} is no longer a circle: strike it from CIRCLES_ALLOWED"
        );
    }
}

#[test]
fn the_check_sees_a_circle_and_a_grouped_import() {
    let dir = std::env::temp_dir().join(format!("gpuslack-structure-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("b")).expect("temp dir");
    std::fs::write(
        dir.join("lib.rs"),
        "pub mod a;\npub mod b;\npub use a::Thing;\n",
    )
    .expect("w");
    std::fs::write(
        dir.join("a.rs"),
        "use crate::{b::inner::Other};\npub struct Thing;\n",
    )
    .expect("w");
    std::fs::write(dir.join("b/mod.rs"), "pub mod inner;\n").expect("w");
    // Through the root's re-export, in code rather than a `use`:
    std::fs::write(dir.join("b/inner.rs"), "pub struct Other(crate::Thing);\n").expect("w");
    let found = circles(&import_graph(&dir));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].0.as_str(), found[0].1.as_str()), ("a", "b"));
}

/// How docs/ARCHITECTURE.md may name a file: its path under its crate's source folder
/// (`export/state.rs`), the folder for a `mod.rs` (`export/`), or its path from the
/// repository root.
fn named(doc: &str, krate: &str, src: &Path, file: &Path) -> bool {
    let rel = file.strip_prefix(src).expect("under src");
    let rel_s = rel.display().to_string();
    let full = format!("{krate}/{rel_s}");
    // Each crate has a lib.rs or main.rs: only the full path says which.
    if rel_s == "lib.rs" || rel_s == "main.rs" {
        return doc.contains(&format!("`{full}`"));
    }
    if doc.contains(&format!("`{full}`")) || doc.contains(&format!("`{rel_s}`")) {
        return true;
    }
    if rel.file_name().is_some_and(|n| n == "mod.rs") {
        let folder = rel
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        return doc.contains(&format!("`{folder}/`"))
            || doc.contains(&format!("`{krate}/{folder}/`"));
    }
    false
}

/// The library's benchmarks and examples, and the scripts beside them: named by their path from
/// the repository root, since `export.rs` alone would be the exporter's.
const BENCHES_AND_EXAMPLES: [&str; 3] = [
    "otel-receiver/benches",
    "otel-receiver/examples",
    "bench-kernels/benches",
];

#[test]
fn the_architecture_names_every_bench_and_example_file() {
    let doc = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).expect("the doc");
    let mut missing = Vec::new();
    for folder in BENCHES_AND_EXAMPLES {
        let mut stack = vec![repo().join(folder)];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("a folder").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let rel = path
                    .strip_prefix(repo())
                    .expect("under the root")
                    .display()
                    .to_string();
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                // A script beside others may be listed by its name after its folder's first.
                let script = !rel.ends_with(".rs") && doc.contains(&format!("`{name}`"));
                if !doc.contains(&format!("`{rel}`")) && !script {
                    missing.push(rel);
                }
            }
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md does not name these files by their full path:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_architecture_names_every_source_file() {
    let doc = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).expect("the doc");
    let mut missing = Vec::new();
    for krate in CRATES {
        let src = repo().join(krate);
        for file in rust_files(&src) {
            if !named(&doc, krate, &src, &file) {
                missing.push(format!(
                    "{krate}/{}",
                    file.strip_prefix(&src).expect("under").display()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md does not name these source files (as `path/under/src.rs`, or \
         `folder/` for a mod.rs); say what each is for:\n{}",
        missing.join("\n")
    );
}
