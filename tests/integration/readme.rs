//! The README's examples. The README shows them without scaffolding; here each one is
//! compiled, and run where it needs no Redis on port 6379, and `the_readme_shows_these`
//! checks that every Rust block of the README is one of them, line for line.

mod guard;
mod memory_test;
mod redis_test;
mod spawned_tasks;
mod tracing_order;
mod usage;

/// The Rust blocks of the README, each as its lines without indentation or blank lines.
fn readme_blocks() -> Vec<Vec<&'static str>> {
    let readme = include_str!("../../README.md");
    let mut blocks = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in readme.lines() {
        match (&mut block, line.trim_end()) {
            (None, fence) if fence.starts_with("```rust") => block = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(block.take()),
            (Some(lines), line) => lines.extend(normalized(line)),
            (None, _) => {}
        }
    }
    blocks
}

fn normalized(line: &str) -> Option<&str> {
    Some(line.trim()).filter(|line| !line.is_empty())
}

#[test]
fn the_readme_shows_these() {
    let sources = [
        include_str!("readme/usage.rs"),
        include_str!("readme/guard.rs"),
        include_str!("readme/tracing_order.rs"),
        include_str!("readme/spawned_tasks.rs"),
        include_str!("readme/memory_test.rs"),
        include_str!("readme/redis_test.rs"),
    ];
    let sources: Vec<Vec<&str>> = sources
        .iter()
        .map(|source| source.lines().filter_map(normalized).collect())
        .collect();
    let blocks = readme_blocks();
    assert_eq!(
        blocks.len(),
        sources.len(),
        "a README block without its file here, or the reverse"
    );
    for block in blocks {
        let found = sources
            .iter()
            .any(|source| source.windows(block.len()).any(|window| window == block));
        assert!(
            found,
            "this README block is not in tests/integration/readme/ as written; update the file \
             (or the README) so they match:\n{}",
            block.join("\n")
        );
    }
}
