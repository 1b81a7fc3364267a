//! The README is a front door and `docs/` the rooms behind it: every relative link in them
//! reaches a file that exists, every anchor a heading of the page it names, and the README
//! stays short enough to read at the door.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::support::repo_root;

/// The README's length the front door is kept under (issue 64).
const README_MAX_LINES: usize = 250;

/// README.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("a readable docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of a page that are prose: code blocks left out (a `# comment` in a shell block
/// is no heading, a `[a](b)` in one no link).
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces as `-`; a repeated one gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let Some(title) = line.trim_start_matches('#').strip_prefix(' ') else {
            continue;
        };
        if !line.starts_with('#') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        out.insert(anchor);
    }
    out
}

/// The targets of a page's inline links, inline code left out.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let bare: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        let mut rest = bare.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

fn name(path: &Path) -> String {
    path.strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn every_relative_link_and_anchor_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!(
                    "{}: {target}: no file {}",
                    name(&page),
                    name(&file)
                ));
                continue;
            }
            if let Some(anchor) = anchor {
                let headings = anchors(&fs::read_to_string(&file).unwrap_or_default());
                if !headings.contains(anchor) {
                    broken.push(format!(
                        "{}: {target}: no heading #{anchor} in {}",
                        name(&page),
                        name(&file)
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // The pages do link to each other: a parser that found nothing would pass the above.
    assert!(checked >= 30, "only {checked} relative links found");
}

#[test]
fn the_readme_is_a_front_door_under_250_lines_that_names_every_page_of_the_docs() {
    let readme = fs::read_to_string(repo_root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < README_MAX_LINES,
        "README.md has {lines} lines: move the detail to a page under docs/"
    );
    let named = links(&readme);
    for page in pages().iter().skip(1) {
        let target = format!("docs/{}", page.file_name().unwrap().to_string_lossy());
        assert!(
            named
                .iter()
                .any(|l| l.split('#').next() == Some(target.as_str())),
            "README.md does not link {target}"
        );
    }
}

#[test]
fn anchors_are_githubs() {
    let page = "# `kubectl tdset`: the plugin\n## Ready at the window's start (`warmUp`)\n\
                ```sh\n# not a heading\n```\n## Install\n## Install\n";
    let got = anchors(page);
    let want: BTreeSet<String> = [
        "kubectl-tdset-the-plugin",
        "ready-at-the-windows-start-warmup",
        "install",
        "install-1",
    ]
    .map(String::from)
    .into();
    assert_eq!(got, want);
    assert_eq!(
        links("see [a](x.md#y) and `[b](not-a-link)`, [c](#z)"),
        vec!["x.md#y", "#z"]
    );
}
