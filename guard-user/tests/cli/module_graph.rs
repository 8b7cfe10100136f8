//! The library's modules follow the data flow (docs/design.md): the languages and the policy,
//! then compiling it, then the kernel, then enforcing it for a scope (the audit log, the
//! resolver, asks, the enforcement core, the hold, confinement, the session, each on the ones
//! before), then the host service, then the command line. A module may use its own layer and the layers before it; this test
//! fails on an import that points back, naming the file, the line and the layers.
//!
//! It reads the sources (`crate::NAME` paths outside comments), leaving out test code: test
//! files and the item after each `#[cfg(test)]`.

use std::path::{Path, PathBuf};

/// The layers, in the order data flows through them.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "the languages and the policy",
        &["policy", "legacy", "authz"],
    ),
    ("compiling a policy", &["compile"]),
    ("the kernel", &["kernel"]),
    // Enforcement for a scope, in the order its parts build on each other.
    ("the audit log", &["audit"]),
    ("guard's resolver and the rules' name lookups", &["resolve"]),
    ("asks, approvals and their messages", &["asks"]),
    (
        "the enforcement core: what is in force and how it changes",
        &["in_force"],
    ),
    ("holding a prompted call until it is answered", &["hold"]),
    ("confining a command's writes and escapes", &["confine"]),
    ("one enforcement session", &["session"]),
    ("the host service and its reports", &["daemon", "doctor"]),
    (
        "the Kubernetes node agent, a front end over the host service",
        &["node"],
    ),
    ("the command line", &["cli"]),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// Every `.rs` file below `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_stem().unwrap().to_string_lossy();
    name == "tests"
        || name.ends_with("_tests")
        || path.components().any(|c| c.as_os_str() == "tests")
}

/// The top-level modules `line` names as `crate::NAME`.
fn crate_modules(line: &str) -> Vec<String> {
    modules_after(line, "crate::")
}

/// The modules `line` names as `PREFIX` + `NAME` (`prefix` a path ending in `::`).
fn modules_after(line: &str, prefix: &str) -> Vec<String> {
    line.match_indices(prefix)
        .filter(|(at, _)| {
            // Not `guard_crate::` or the like: the prefix must start a path.
            line[..*at]
                .chars()
                .last()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
        .map(|(at, _)| {
            line[at + prefix.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// The lines of `text` that are code (not comments) outside test items, numbered from 1. A
/// test item is what follows `#[cfg(test)]`: one line ending in `;` (`mod tests;`), or a block
/// up to its closing brace.
fn non_test_lines(text: &str) -> Vec<(usize, &str)> {
    let mut kept = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((index, line)) = lines.next() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        if !code.starts_with("#[cfg(test)]") {
            kept.push((index + 1, code));
            continue;
        }
        let mut depth = 0usize;
        let mut opened = false;
        for (_, line) in lines.by_ref() {
            let code = line.trim_start();
            if code.starts_with("//") || code.starts_with("#[") {
                continue;
            }
            for c in code.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
            if (opened && depth == 0) || (!opened && code.trim_end().ends_with(';')) {
                break;
            }
        }
    }
    kept
}

#[test]
fn no_module_imports_a_later_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut back_edges = Vec::new();
    let mut checked = 0;
    for path in sources(&src) {
        let relative = path.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = top.trim_end_matches(".rs");
        if ["lib", "main"].contains(&module) || is_test_file(relative) {
            continue;
        }
        let Some(from) = layer_of(module) else {
            panic!(
                "src/{} is in module `{module}`, which no layer names: add it to LAYERS",
                relative.display()
            );
        };
        let text = std::fs::read_to_string(&path).unwrap();
        for (number, code) in non_test_lines(&text) {
            for target in crate_modules(code) {
                checked += 1;
                let Some(to) = layer_of(&target) else {
                    continue;
                };
                if to > from {
                    back_edges.push(format!(
                        "src/{}:{}: `{module}` ({}) uses `{target}` ({}): {}",
                        relative.display(),
                        number,
                        LAYERS[from].0,
                        LAYERS[to].0,
                        code
                    ));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} crate paths found: is the scan broken?"
    );
    assert!(
        back_edges.is_empty(),
        "imports that point back against the data flow (move the item to the earlier layer, \
         or the using code to the later one):\n{}",
        back_edges.join("\n")
    );
}

/// The control socket's wire types (`src/daemon/wire/`) stand on their own: of the daemon's
/// modules they use only each other, never its state, service, scopes or server (which convert
/// to them), so the CLI reads them without the daemon's internals.
#[test]
fn the_wire_types_use_no_other_daemon_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = sources(&src.join("daemon/wire"));
    assert!(
        files.len() >= 3,
        "src/daemon/wire/ has {} files: has it moved?",
        files.len()
    );
    let mut outside = Vec::new();
    for path in files {
        let relative = path.strip_prefix(&src).unwrap();
        // `super::` is the daemon from the wire's mod.rs, the wire module from a file beside it.
        let leaves = if path.ends_with("mod.rs") {
            "super::"
        } else {
            "super::super::"
        };
        let text = std::fs::read_to_string(&path).unwrap();
        for (number, code) in non_test_lines(&text) {
            if code.contains(leaves)
                || modules_after(code, "crate::daemon::")
                    .iter()
                    .any(|m| m != "wire")
            {
                outside.push(format!("src/{}:{number}: {code}", relative.display()));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "wire types that use another daemon module (give the wire its own plain type, or \
         move the type into the wire, and convert at the daemon's edge):\n{}",
        outside.join("\n")
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    for line in lib.lines() {
        if let Some(name) = line
            .trim()
            .strip_prefix("pub mod ")
            .and_then(|n| n.strip_suffix(';'))
        {
            assert!(
                layer_of(name).is_some(),
                "src/lib.rs declares `{name}`, which no layer names"
            );
        }
    }
}

#[test]
fn the_scan_sees_a_back_edge() {
    assert_eq!(
        crate_modules("use crate::daemon::client::Client;"),
        ["daemon"]
    );
    assert_eq!(
        crate_modules("let x = crate::kernel::scope::a(crate::policy::b());"),
        ["kernel", "policy"]
    );
    assert!(crate_modules("use guard_crate::x;").is_empty());
    assert_eq!(
        modules_after(
            "use crate::daemon::wire::protocol::Request; crate::daemon::scopes::x",
            "crate::daemon::"
        ),
        ["wire", "scopes"]
    );
    assert!(layer_of("daemon") > layer_of("compile"));
    let source = "use crate::a;\n#[cfg(test)]\nmod tests;\nuse crate::b;\n#[cfg(test)]\nmod t {\n    use crate::c;\n    fn f() {}\n}\n// crate::d\nuse crate::e;\n";
    let kept: Vec<&str> = non_test_lines(source).into_iter().map(|(_, l)| l).collect();
    assert_eq!(kept, ["use crate::a;", "use crate::b;", "use crate::e;"]);
}
