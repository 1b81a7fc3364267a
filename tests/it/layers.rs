//! The crate's rooms import only downward, and no two rooms import each other, directly or
//! round a circle. Read from the source's own `use` lines and paths (`crate::`, `super::`,
//! `self::`, a child module's name), test modules left out.
//!
//! The layers, top first: the controller's wing (run → driver → stages → forms → kinds → io →
//! state → lane), then the crate's modules around it (`CRATE_LAYERS`). A room may use rooms of
//! its own layer or below; a new module must be given a layer here.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The controller's layers, top first (`src/controller/<layer>/…`, or `<layer>.rs`).
const CONTROLLER_LAYERS: &[&str] = &[
    "run", "driver", "stages", "forms", "kinds", "io", "state", "lane",
];

/// The crate's top-level modules by layer, top first. The edges (the `kubectl` plugin, the
/// command line) use the operator; the operator uses the pure core; the core uses the API types.
const CRATE_LAYERS: &[&[&str]] = &[
    &["plugin"],
    &["cli"],
    &["controller"],
    // The wake proxy: a wing beside the controller that uses only what is below it.
    &["wake"],
    &["http"],
    &["telemetry"],
    &["cache", "status"],
    &["preview", "memo"],
    &["workload"],
    &["schedule"],
    &["api", "clients"],
    &["error", "shard", "clock"],
];

type Module = Vec<String>;

/// Every module of the library: its path (`["controller", "forms", "owned"]`) and its file.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let file = parts.pop().expect("a file name");
            // Test modules (`tests.rs`, `tests/`) are left out.
            if parts.iter().any(|p| p == "tests") {
                continue;
            }
            match file.as_str() {
                // The binary is its own crate; test files are left out.
                "main.rs" | "tests.rs" => continue,
                "lib.rs" | "mod.rs" => {}
                other => parts.push(other.trim_end_matches(".rs").to_string()),
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The source without comments, string contents or test modules.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !ident(chars.get(i.wrapping_sub(1)))
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (chars.get(i + 2) == Some(&'\'') || next == Some('\\')) {
            // A char literal ('"', '\n'); a lifetime ('a) has no closing quote.
            i += if next == Some('\\') { 4 } else { 3 };
            while next == Some('\\') && i <= chars.len() && chars[i - 1] != '\'' {
                i += 1;
            }
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// `a::{b, c::{d, e}}` as the paths it names: `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![path.to_string()];
    };
    let prefix = tree[..open].trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| match p.as_str() {
            "self" => prefix.trim_end_matches("::").to_string(),
            _ => format!("{prefix}{p}"),
        })
        .collect()
}

/// The paths a file's code names: its `use` trees, and `crate::`/`super::`/`self::` paths.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = String::new();
    let mut text = code;
    while let Some(at) = find_use(text) {
        rest.push_str(&text[..at]);
        let end = text[at..].find(';').map_or(text.len(), |e| at + e);
        out.extend(expand(&text[at + 4..end]));
        text = &text[end..];
    }
    rest.push_str(text);
    // A child module named by its bare name in code (`calendars::on_calendar(..)`): kept as a
    // path; `resolve` drops the names that are not children.
    let bytes = rest.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let start = i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == b':');
        if start && (bytes[i].is_ascii_lowercase() || bytes[i] == b'_') {
            let mut j = i;
            while j < bytes.len() && is_ident(bytes[j]) {
                j += 1;
            }
            let word = &rest[i..j];
            if rest[j..].starts_with("::") && !["crate", "super", "self"].contains(&word) {
                out.push(format!("{word}::"));
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    let bytes = rest.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| bytes[i..].starts_with(p.as_bytes()));
        if starts && (i == 0 || !is_ident(bytes[i - 1])) {
            let mut j = i;
            while j < bytes.len() && (is_ident(bytes[j]) || bytes[j] == b':') {
                j += 1;
            }
            out.push(rest[i..j].trim_end_matches(':').to_string());
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Where the next `use` item starts (`use`, `pub use`, `pub(crate) use`).
fn find_use(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find("use ") {
        let at = from + i;
        let before = text[..at].trim_end_matches(' ');
        if before.is_empty()
            || before.ends_with('\n')
            || before.ends_with(';')
            || before.ends_with('{')
            || before.ends_with('}')
            || before.ends_with("pub")
            || before.ends_with(')')
        {
            return Some(at);
        }
        from = at + 4;
    }
    None
}

/// The module a path names, as the longest prefix that is a module (`None`: another crate).
fn resolve(from: &Module, path: &str, all: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let first = *segments.first()?;
    let mut base: Module = match first {
        "crate" => vec![],
        "self" => from.clone(),
        "super" => from.clone(),
        // A child module named by its bare name (`use watches::…` in run/mod.rs).
        child if all.contains_key(&[from.clone(), vec![child.to_string()]].concat()) => {
            from.clone()
        }
        _ => return None,
    };
    let mut rest = &segments[..];
    if first == "crate" || first == "self" {
        rest = &segments[1..];
    }
    while rest.first() == Some(&"super") {
        base.pop();
        rest = &rest[1..];
    }
    let mut found = base.clone();
    let mut path = base;
    for s in rest {
        path.push(s.to_string());
        if all.contains_key(&path) {
            found = path.clone();
        } else {
            break;
        }
    }
    Some(found)
}

/// The crate's root and the controller's: they only name their rooms and re-export.
fn is_root(m: &Module) -> bool {
    m.is_empty() || *m == ["controller"]
}

/// The layer of a module: `Some((in the controller, rank))`, rank 0 at the top. The
/// controller's root counts as above every layer of it: a room that takes a name through its
/// re-exports imports upward.
fn layer(m: &Module) -> Option<(bool, usize)> {
    let top = m.first()?;
    if top == "controller" {
        let Some(second) = m.get(1) else {
            return Some((true, 0));
        };
        let rank = CONTROLLER_LAYERS.iter().position(|l| l == second);
        return Some((
            true,
            1 + rank.unwrap_or_else(|| {
                panic!("src/controller/{second}: give it a layer in CONTROLLER_LAYERS")
            }),
        ));
    }
    Some((false, crate_rank(m)?))
}

fn crate_rank(m: &Module) -> Option<usize> {
    let top = m.first()?;
    let rank = CRATE_LAYERS.iter().position(|l| l.contains(&top.as_str()));
    Some(rank.unwrap_or_else(|| panic!("src/{top}: give it a layer in CRATE_LAYERS")))
}

/// Every module's imports of other modules.
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let all = modules(src);
    let mut edges = BTreeMap::new();
    for (m, file) in &all {
        let text = fs::read_to_string(file).expect("read a source file");
        let targets: BTreeSet<Module> = paths(&code(&text))
            .iter()
            .filter_map(|p| resolve(m, p, &all))
            .filter(|t| t != m && !t.is_empty())
            // The crate's root and the controller's only name their rooms (and re-export).
            .filter(|t| !(is_root(m) && t.starts_with(m)))
            .collect();
        edges.insert(m.clone(), targets);
    }
    edges
}

fn name(m: &Module) -> String {
    format!("src/{}", m.join("/"))
}

#[test]
fn rooms_import_only_their_own_layer_or_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut upward = Vec::new();
    for (from, targets) in graph(&src) {
        for to in targets {
            let (Some(a), Some(b)) = (crate_rank(&from), crate_rank(&to)) else {
                continue;
            };
            if b < a {
                upward.push(format!("{} -> {}", name(&from), name(&to)));
                continue;
            }
            // Inside the controller: its layers (its mod.rs, which only names them, aside).
            if let (Some((true, a)), Some((true, b))) = (layer(&from), layer(&to))
                && b < a
            {
                upward.push(format!("{} -> {}", name(&from), name(&to)));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that run upward:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_two_rooms_import_each_other_round_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // A module and its own children are one room here: a mod.rs names its rooms (and
    // re-exports them), and a child takes shared names from it (`super::Turn`).
    let edges: BTreeMap<Module, BTreeSet<Module>> = graph(&src)
        .into_iter()
        .map(|(m, targets)| {
            let rooms = targets
                .into_iter()
                .filter(|t| !parent_and_child(&m, t))
                .collect();
            (m, rooms)
        })
        .collect();
    let circles = strongly_connected(&edges);
    let shown: Vec<String> = circles
        .iter()
        .map(|c| c.iter().map(name).collect::<Vec<_>>().join(" <-> "))
        .collect();
    assert!(
        shown.is_empty(),
        "circles of imports:\n{}",
        shown.join("\n")
    );
}

fn parent_and_child(a: &Module, b: &Module) -> bool {
    let direct = |p: &Module, c: &Module| c.len() == p.len() + 1 && c.starts_with(p);
    direct(a, b) || direct(b, a)
}

/// The groups of two or more modules that reach each other (Tarjan's algorithm).
fn strongly_connected(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        next: usize,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            let Some((w, _)) = edges.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.push(w.clone());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.out.push(group);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The check itself: an import that runs upward, and a circle, are found.
#[test]
fn the_check_finds_an_upward_import_and_a_circle() {
    let dir = std::env::temp_dir().join(format!("tdset-layers-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("controller/state")).expect("mkdir");
    fs::create_dir_all(src.join("controller/forms")).expect("mkdir");
    let write = |p: &str, t: &str| fs::write(src.join(p), t).expect("write");
    write("lib.rs", "pub mod api;\npub mod controller;\n");
    write(
        "api.rs",
        "// use crate::controller; is only a comment\nconst S: &str = \"crate::controller\";\n",
    );
    write(
        "controller/mod.rs",
        "mod forms;\nmod lane;\nmod state;\npub use state::Context;\n",
    );
    write("controller/forms/mod.rs", "pub(crate) mod owned;\n");
    write(
        "controller/forms/owned.rs",
        "use crate::controller::state::{Context, index};\n",
    );
    write(
        "controller/state/mod.rs",
        "mod index;\npub use index::Index;\n",
    );
    write(
        "controller/state/index.rs",
        "fn f() { crate::controller::forms::owned::g(); super::other::h(); }\n",
    );
    write(
        "controller/state/other.rs",
        "use super::index::Index;\nuse crate::controller::Context;\n",
    );
    write(
        "controller/lane.rs",
        "fn f() { forms::g(); super::forms::h(); }\n",
    );
    let edges = graph(&src);
    let state_index: Module = ["controller", "state", "index"].map(String::from).to_vec();
    let owned: Module = ["controller", "forms", "owned"].map(String::from).to_vec();
    let api: Module = vec!["api".to_string()];
    assert!(edges[&state_index].contains(&owned), "{edges:?}");
    assert!(edges[&owned].contains(&state_index), "{edges:?}");
    assert!(
        edges[&api].is_empty(),
        "comments and strings are not imports: {edges:?}"
    );
    let (Some((true, from)), Some((true, to))) = (layer(&state_index), layer(&owned)) else {
        panic!("both in the controller");
    };
    assert!(to < from, "state -> forms runs upward");
    let circles = strongly_connected(&edges);
    assert!(
        circles
            .iter()
            .any(|c| c.contains(&state_index) && c.contains(&owned)),
        "{circles:?}"
    );
    // Through the controller's re-exports: upward from any of its layers.
    let other: Module = ["controller", "state", "other"].map(String::from).to_vec();
    let root: Module = vec!["controller".to_string()];
    assert!(edges[&other].contains(&root), "{edges:?}");
    let (Some((true, from)), Some((true, to))) = (layer(&other), layer(&root)) else {
        panic!("both in the controller");
    };
    assert!(to < from, "state -> the controller's root runs upward");
    let lane: Module = ["controller", "lane"].map(String::from).to_vec();
    let forms: Module = ["controller", "forms"].map(String::from).to_vec();
    assert!(edges[&lane].contains(&forms), "a path in code: {edges:?}");
    let _ = fs::remove_dir_all(&dir);
}
