//! The peer comparison as an SVG chart (`--svg PATH`): pairs per second and Redis CPU per
//! pair for each workload and library, and W2's waits and hand-off gaps per mode, as
//! horizontal bars.

use std::fmt::Write;

use crate::report::CostRow;
use crate::workloads::Contention;

/// One bar: its label, its value, and whether it is a peer's (drawn grey).
struct Bar {
    label: String,
    value: f64,
    peer: bool,
}

/// Bars on one scale under a title.
struct Panel {
    title: &'static str,
    /// How a value is printed after its bar.
    unit: &'static str,
    bars: Vec<Bar>,
}

const WIDTH: f64 = 820.0;
const LABEL_WIDTH: f64 = 300.0;
const BAR_SPACE: f64 = 420.0;
const BAR_HEIGHT: f64 = 16.0;
const ROW: f64 = 22.0;
const TITLE: f64 = 34.0;

/// The chart of `rows` (the Redis cost table's) and `w2` (its waits), with `caption` (the
/// machine and the workloads; a line per `; `-separated part) under the title.
pub fn svg(rows: &[CostRow], w2: &[Contention], caption: &str) -> String {
    let library = |row: &CostRow| format!("{} {}", row.group, row.library);
    let panels = [
        Panel {
            title: "Acquire + release pairs per second (higher is better)",
            unit: "/s",
            bars: rows
                .iter()
                .map(|row| Bar {
                    label: library(row),
                    value: row.ops_per_s,
                    peer: !row.library.starts_with("fencelock"),
                })
                .collect(),
        },
        Panel {
            title: "Redis CPU per pair, µs (lower is better)",
            unit: " µs",
            bars: rows
                .iter()
                .map(|row| Bar {
                    label: library(row),
                    value: row.server.cpu_per(row.pairs),
                    peer: !row.library.starts_with("fencelock"),
                })
                .collect(),
        },
        Panel {
            title: "W2, 8 clients on one key: wait for the lock, p99 and max, ms (lower is better)",
            unit: " ms",
            bars: w2
                .iter()
                .flat_map(|run| {
                    let peer = !run.mode.is_fencelock();
                    [("p99", run.wait.p99), ("max", run.wait.max)].map(|(what, wait)| Bar {
                        label: format!("{} {what}", run.mode.label()),
                        value: wait.as_secs_f64() * 1e3,
                        peer,
                    })
                })
                .collect(),
        },
        Panel {
            title: "W2: release sent to the next grant (the key unused), p50 and p99, µs",
            unit: " µs",
            bars: w2
                .iter()
                .flat_map(|run| {
                    let peer = !run.mode.is_fencelock();
                    [("p50", run.handoff_gap.p50), ("p99", run.handoff_gap.p99)].map(
                        |(what, gap)| Bar {
                            label: format!("{} {what}", run.mode.label()),
                            value: gap.as_secs_f64() * 1e6,
                            peer,
                        },
                    )
                })
                .collect(),
        },
    ];
    let lines: Vec<&str> = caption.split("; ").collect();
    let header = 30.0 + 16.0 * lines.len() as f64;
    let height = header
        + panels
            .iter()
            .map(|panel| TITLE + ROW * panel.bars.len() as f64)
            .sum::<f64>();
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">fencelock against \
         rslock on one redis-server</text>\n"
    );
    for (i, line) in lines.iter().enumerate() {
        let _ = writeln!(
            svg,
            "<text x=\"10\" y=\"{}\" fill=\"#555\">{}</text>",
            38.0 + 16.0 * i as f64,
            escape(line)
        );
    }
    let mut top = header;
    for panel in &panels {
        draw(&mut svg, panel, top);
        top += TITLE + ROW * panel.bars.len() as f64;
    }
    svg.push_str("</svg>\n");
    svg
}

/// Draws `panel` from `top`: its title, then a bar per row, scaled to its largest value.
fn draw(svg: &mut String, panel: &Panel, top: f64) {
    let largest = panel
        .bars
        .iter()
        .map(|bar| bar.value)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let _ = writeln!(
        svg,
        "<text x=\"10\" y=\"{}\" font-weight=\"bold\">{}</text>",
        top + 22.0,
        escape(panel.title)
    );
    for (i, bar) in panel.bars.iter().enumerate() {
        let y = top + TITLE + ROW * i as f64;
        let length = BAR_SPACE * bar.value / largest;
        let fill = if bar.peer { "#9e9e9e" } else { "#2f6db5" };
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{LABEL_WIDTH}\" y=\"{}\" width=\"{length:.1}\" height=\"{BAR_HEIGHT}\" \
             fill=\"{fill}\"/>\
             <text x=\"{}\" y=\"{}\">{}{}</text>",
            LABEL_WIDTH - 8.0,
            y + 12.0,
            escape(&bar.label),
            y,
            LABEL_WIDTH + length + 6.0,
            y + 12.0,
            figure(bar.value),
            panel.unit
        );
    }
}

/// A value with the digits that matter.
fn figure(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
