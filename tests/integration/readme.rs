//! The examples of the README and the guide (`docs/guide/`). The documents show them without
//! scaffolding; here each one is a file, compiled, and run where it needs no Redis on port
//! 6379. `the_documents_show_these` checks that each document's Rust blocks are these files,
//! in order, line for line.

#[cfg(all(feature = "zookeeper", feature = "etcd"))]
mod consensus;
mod faults_test;
mod guard;
mod kinds;
mod memory_test;
#[cfg(feature = "metrics")]
mod observability;
mod redis_test;
mod restart;
mod several_keys;
mod shard_stock;
mod shutdown;
mod single_flight;
mod spawned_tasks;
mod sql;
mod tracing_order;
mod usage;

/// An example file: its name in `tests/integration/readme/` and its text.
type Example = (&'static str, &'static str);

/// Each document, and the example files it shows, in order.
const DOCUMENTS: [(&str, &str, &[Example]); 11] = [
    (
        "README.md",
        include_str!("../../README.md"),
        &[
            ("usage.rs", include_str!("readme/usage.rs")),
            ("guard.rs", include_str!("readme/guard.rs")),
            ("shard_stock.rs", include_str!("readme/shard_stock.rs")),
        ],
    ),
    (
        "docs/guide/kinds.md",
        include_str!("../../docs/guide/kinds.md"),
        &[
            ("kinds.rs", include_str!("readme/kinds.rs")),
            ("several_keys.rs", include_str!("readme/several_keys.rs")),
            ("single_flight.rs", include_str!("readme/single_flight.rs")),
        ],
    ),
    (
        "docs/guide/observability.md",
        include_str!("../../docs/guide/observability.md"),
        &[
            ("tracing_order.rs", include_str!("readme/tracing_order.rs")),
            ("observability.rs", include_str!("readme/observability.rs")),
            ("spawned_tasks.rs", include_str!("readme/spawned_tasks.rs")),
        ],
    ),
    (
        "docs/guide/testing.md",
        include_str!("../../docs/guide/testing.md"),
        &[
            ("memory_test.rs", include_str!("readme/memory_test.rs")),
            ("redis_test.rs", include_str!("readme/redis_test.rs")),
            ("faults_test.rs", include_str!("readme/faults_test.rs")),
        ],
    ),
    (
        "docs/guide/databases.md",
        include_str!("../../docs/guide/databases.md"),
        &[("sql.rs", include_str!("readme/sql.rs"))],
    ),
    (
        "docs/guide/consensus.md",
        include_str!("../../docs/guide/consensus.md"),
        &[("consensus.rs", include_str!("readme/consensus.rs"))],
    ),
    (
        "docs/guide/guarantees.md",
        include_str!("../../docs/guide/guarantees.md"),
        &[
            ("shutdown.rs", include_str!("readme/shutdown.rs")),
            ("restart.rs", include_str!("readme/restart.rs")),
        ],
    ),
    (
        "docs/guide/topologies.md",
        include_str!("../../docs/guide/topologies.md"),
        &[],
    ),
    (
        "docs/guide/operating.md",
        include_str!("../../docs/guide/operating.md"),
        &[],
    ),
    (
        "docs/guide/performance.md",
        include_str!("../../docs/guide/performance.md"),
        &[],
    ),
    (
        "docs/guide/development.md",
        include_str!("../../docs/guide/development.md"),
        &[],
    ),
];

/// The languages a block may have; only Rust blocks are code that must compile.
const LANGUAGES: [&str; 4] = ["rust", "toml", "sh", "text"];

/// Where a file's scaffolding starts: the lines from here on are not in the README.
const SCAFFOLDING: &str = "// ---- not in the README";

/// The fenced blocks of `markdown` as (language, lines), with the fence's indentation
/// taken off the lines. Fences are ``` or ~~~, indented or not, as Markdown reads them.
fn fenced_blocks(markdown: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(&str, usize, String, Vec<String>)> = None;
    for line in markdown.lines() {
        let text = line.trim_start();
        let indent = line.len() - text.len();
        let fence = ["```", "~~~"]
            .into_iter()
            .find(|fence| text.starts_with(fence));
        match (&mut open, fence) {
            (Some((marker, ..)), Some(fence)) if fence == *marker && text.trim_end() == fence => {
                let (_, _, language, lines) = open.take().expect("an open block");
                blocks.push((language, lines));
            }
            (Some((_, indent, _, lines)), _) => {
                let unindented = line.get(*indent..).unwrap_or(line.trim_start());
                lines.push(unindented.trim_end().to_owned());
            }
            (None, Some(fence)) => {
                let info = text[fence.len()..].trim();
                let language = info.split(',').next().unwrap_or_default().trim().to_owned();
                open = Some((fence, indent, language, Vec::new()));
            }
            (None, None) => {}
        }
    }
    assert!(
        open.is_none(),
        "a fenced block of the README is never closed"
    );
    blocks
}

/// The part of an example file the README shows: after its `//!` and `#![...]` header,
/// before its scaffolding, without the blank lines around it.
fn shown_part(source: &str) -> Vec<String> {
    let lines: Vec<&str> = source
        .lines()
        .skip_while(|line| line.starts_with("//!") || line.starts_with("#![") || line.is_empty())
        .take_while(|line| !line.starts_with(SCAFFOLDING))
        .map(str::trim_end)
        .collect();
    let end = lines
        .iter()
        .rposition(|line| !line.is_empty())
        .map_or(0, |last| last + 1);
    lines[..end].iter().map(|line| (*line).to_owned()).collect()
}

#[test]
fn the_documents_show_these() {
    let guide = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide"))
        .expect("docs/guide")
        .map(|entry| {
            format!(
                "docs/guide/{}",
                entry.unwrap().file_name().to_string_lossy()
            )
        });
    for page in guide {
        assert!(
            DOCUMENTS.iter().any(|(document, ..)| *document == page),
            "{page} is checked here too: add it to DOCUMENTS"
        );
    }
    for (document, markdown, examples) in DOCUMENTS {
        let blocks = fenced_blocks(markdown);
        for (language, lines) in &blocks {
            assert!(
                LANGUAGES.contains(&language.as_str()),
                "a block of {document} in `{language}` (one of {LANGUAGES:?} expected; a Rust \
                 block must say `rust` to be checked here):\n{}",
                lines.join("\n")
            );
        }
        let rust: Vec<&Vec<String>> = blocks
            .iter()
            .filter(|(language, _)| language == "rust")
            .map(|(_, lines)| lines)
            .collect();
        assert_eq!(
            rust.len(),
            examples.len(),
            "each Rust block of {document} has its file in tests/integration/readme/, in order"
        );
        for (block, (file, source)) in rust.into_iter().zip(examples) {
            assert_eq!(
                *block,
                shown_part(source),
                "{document}'s block differs from tests/integration/readme/{file}; make them equal"
            );
        }
    }
}

#[test]
fn fences_are_found_as_markdown_reads_them() {
    let markdown =
        "text\n```rust\nfn a() {}\n```\n- item\n\n  ~~~toml,extra\n  a = 1\n  ~~~\n```\n```\n";
    let blocks = fenced_blocks(markdown);
    let languages: Vec<&str> = blocks
        .iter()
        .map(|(language, _)| language.as_str())
        .collect();
    assert_eq!(languages, ["rust", "toml", ""]);
    assert_eq!(blocks[1].1, ["a = 1"]);
    assert_eq!(
        shown_part("//! doc\n#![allow(x)]\n\nfn a() {}\n\n// ---- not in the README\nfn b() {}\n"),
        ["fn a() {}"]
    );
}
