//! The soak's report (docs/performance.md, "Soak"): `report.md` and `index.html` with the
//! checks, the numbers and the events, and SVG plots over time — request rate, latency,
//! failures, events and every process's memory — drawn here as plain polylines.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::load::{Op, Recorder};
use super::memory::Sample;
use super::{Event, Options, Window};

const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf",
];
const W: f64 = 960.0;
const H: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 210.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 34.0;

/// One line of a plot: its name and points (seconds, value).
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A round step for about `n` ticks over `span`.
fn step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag)
}

/// A line plot over `[0, x_max]` seconds: axes, ticks, one polyline per series, the events as
/// thin vertical marks (their kind in a tooltip), a legend on the right.
pub fn plot(title: &str, unit: &str, x_max: f64, series: &[Series], events: &[Event]) -> String {
    let y_max =
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0f64, f64::max).max(1e-9) * 1.08;
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |v: f64| LEFT + v / x_max.max(1e-9) * pw;
    let y = |v: f64| TOP + ph - v / y_max * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="16" font-size="13" font-weight="bold">{}</text>"#,
        esc(title)
    );
    for e in events {
        let _ = write!(
            s,
            r#"<line x1="{0:.1}" x2="{0:.1}" y1="{TOP}" y2="{1:.1}" stroke="{2}" stroke-opacity="0.35"><title>{3}</title></line>"#,
            x(e.at_ms as f64 / 1000.0),
            TOP + ph,
            kind_color(&e.kind),
            esc(&format!(
                "+{:.1}s {}: {}",
                e.at_ms as f64 / 1000.0,
                e.kind,
                e.detail.chars().take(200).collect::<String>()
            ))
        );
    }
    let ys = step(y_max, 4.0);
    let mut v = 0.0;
    while v <= y_max {
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{0:.1}" y1="{1:.1}" y2="{1:.1}" stroke="#ddd"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            LEFT + pw,
            y(v),
            LEFT - 4.0,
            y(v) + 4.0,
            trim(v)
        );
        v += ys;
    }
    let xs = step(x_max, 8.0);
    let mut v = 0.0;
    while v <= x_max {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x(v),
            TOP + ph + 14.0,
            trim(v)
        );
        v += xs;
    }
    let _ = write!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="#333"/><text x="{:.1}" y="{:.1}" text-anchor="middle">seconds since the load started</text><text x="12" y="{:.1}" transform="rotate(-90 12 {:.1})" text-anchor="middle">{}</text>"##,
        LEFT + pw / 2.0,
        H - 4.0,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(unit)
    );
    for (i, se) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<String> = se.points.iter().map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b))).collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.3" points="{}"/>"#,
            pts.join(" ")
        );
        let ly = TOP + 12.0 + i as f64 * 14.0;
        if ly < H - BOTTOM {
            let _ = write!(
                s,
                r#"<line x1="{0:.1}" x2="{1:.1}" y1="{2:.1}" y2="{2:.1}" stroke="{color}" stroke-width="2"/><text x="{3:.1}" y="{4:.1}">{5}</text>"#,
                W - RIGHT + 10.0,
                W - RIGHT + 26.0,
                ly,
                W - RIGHT + 30.0,
                ly + 4.0,
                esc(&se.name)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

fn trim(v: f64) -> String {
    if v.fract().abs() < 1e-9 { format!("{v:.0}") } else { format!("{v:.2}") }
}

fn kind_color(kind: &str) -> &'static str {
    let i = kind.bytes().fold(0usize, |a, b| a.wrapping_mul(31).wrapping_add(b as usize));
    PALETTE[i % PALETTE.len()]
}

/// Events as rows of marks, one row per kind: when each ran and how long it took.
fn timeline(x_max: f64, events: &[Event]) -> String {
    let mut kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    kinds.sort();
    kinds.dedup();
    let row = 18.0;
    let h = TOP + BOTTOM + row * kinds.len().max(1) as f64;
    let pw = W - LEFT - RIGHT;
    let x = |v: f64| LEFT + v / x_max.max(1e-9) * pw;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="16" font-size="13" font-weight="bold">events</text>"#
    );
    for (i, k) in kinds.iter().enumerate() {
        let y = TOP + row * i as f64;
        let _ = write!(s, r#"<text x="{:.1}" y="{:.1}">{}</text>"#, W - RIGHT + 10.0, y + 12.0, esc(k));
        for e in events.iter().filter(|e| e.kind == *k) {
            let (a, b) = (x(e.at_ms as f64 / 1000.0), x(e.end_ms as f64 / 1000.0));
            let _ = write!(
                s,
                r#"<rect x="{a:.1}" y="{:.1}" width="{:.1}" height="12" fill="{}"><title>{}</title></rect>"#,
                y + 2.0,
                (b - a).max(2.0),
                kind_color(k),
                esc(&format!(
                    "+{:.1}s {}: {}",
                    e.at_ms as f64 / 1000.0,
                    e.kind,
                    e.detail.chars().take(200).collect::<String>()
                ))
            );
        }
    }
    let _ = write!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw:.1}" height="{:.1}" fill="none" stroke="#333"/></svg>"##,
        h - TOP - BOTTOM
    );
    s.push('\n');
    s
}

/// `(p50, p99, max)` of a sorted slice.
fn quantiles(sorted: &[u32]) -> (u32, u32, u32) {
    if sorted.is_empty() {
        return (0, 0, 0);
    }
    let q = |f: f64| sorted[((sorted.len() - 1) as f64 * f).round() as usize];
    (q(0.5), q(0.99), sorted[sorted.len() - 1])
}

/// Writes the report; returns its directory.
pub fn write(
    opts: &Options,
    rec: &Recorder,
    events: &[Event],
    samples: &[Sample],
    windows: &[Window],
    checks: &[(String, bool, String)],
) -> Result<PathBuf> {
    let dir = opts.out.clone().unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        crate::repo_root().join("target").join("soak").join(format!("{}-{}", opts.seed, now.as_secs()))
    });
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let reqs = rec.reqs();
    let failures = rec.failures();
    let end_s = reqs.iter().map(|r| r.at_ms).max().unwrap_or(0).max(1000) as f64 / 1000.0;

    // Rate per second, latency and failures per 5 s.
    let mut per_s: BTreeMap<u32, [f64; 3]> = BTreeMap::new();
    let mut lat: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for r in &reqs {
        let b = per_s.entry(r.at_ms / 1000).or_default();
        b[matches!(r.op, Op::Write) as usize] += 1.0;
        if matches!(r.op, Op::AdmitValid | Op::AdmitRefused) {
            b[2] += 1.0;
        }
        lat.entry(r.at_ms / 5000).or_default().push(r.latency_us);
    }
    let rate = |i: usize, name: &str| Series {
        name: name.into(),
        points: per_s.iter().map(|(s, b)| (*s as f64, b[i])).collect(),
    };
    let mut p = [Vec::new(), Vec::new(), Vec::new()];
    for (b, v) in lat.iter_mut() {
        v.sort_unstable();
        let (a, c, m) = quantiles(v);
        for (i, q) in [a, c, m].into_iter().enumerate() {
            p[i].push((*b as f64 * 5.0, q as f64 / 1000.0));
        }
    }
    let [p50, p99, pmax] = p;
    let mut fail: BTreeMap<u32, [f64; 3]> = (0..=(end_s as u32 / 5)).map(|b| (b, [0.0; 3])).collect();
    for f in &failures {
        let i = if f.wrong {
            2
        } else if f.excused(windows) {
            1
        } else {
            0
        };
        fail.entry(f.at_ms / 5000).or_default()[i] += 1.0;
    }
    let fseries = |i: usize, name: &str| Series {
        name: name.into(),
        points: fail.iter().map(|(b, v)| (*b as f64 * 5.0, v[i])).collect(),
    };
    let mut procs: BTreeMap<(String, String, u32), Vec<(f64, f64)>> = BTreeMap::new();
    for s in samples {
        procs
            .entry((s.role.clone(), s.pod.clone(), s.pid))
            .or_default()
            .push((s.at_ms as f64 / 1000.0, s.rss_kb as f64 / 1024.0));
    }
    let mem: Vec<Series> = procs
        .into_iter()
        .map(|((role, pod, pid), points)| Series { name: format!("{role} {} {pid}", short(&pod)), points })
        .collect();

    let plots = [
        (
            "requests.svg",
            plot(
                "requests per second",
                "requests/s",
                end_s,
                &[rate(0, "reads and lists"), rate(1, "writes"), rate(2, "admission")],
                events,
            ),
        ),
        (
            "latency.svg",
            plot(
                "latency per 5 s",
                "ms",
                end_s,
                &[
                    Series { name: "p50".into(), points: p50 },
                    Series { name: "p99".into(), points: p99 },
                    Series { name: "max".into(), points: pmax },
                ],
                events,
            ),
        ),
        (
            "failures.svg",
            plot(
                "failed requests per 5 s",
                "requests",
                end_s,
                &[
                    fseries(0, "outside a window"),
                    fseries(1, "in a SIGKILL window"),
                    fseries(2, "wrong answers"),
                ],
                events,
            ),
        ),
        ("events.svg", timeline(end_s, events)),
        ("memory.svg", plot("resident memory of every dco process", "MB", end_s, &mem, events)),
    ];
    for (name, svg) in &plots {
        std::fs::write(dir.join(name), svg)?;
    }
    let md = markdown(opts, &reqs, &failures, events, windows, checks);
    std::fs::write(dir.join("report.md"), &md)?;
    let mut html = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>dco soak</title><body style=\"font-family:sans-serif;max-width:1000px\">\n<pre style=\"white-space:pre-wrap\">",
    );
    html.push_str(&esc(&md));
    html.push_str("</pre>\n");
    for (name, _) in &plots {
        let _ = writeln!(html, "<p><img src=\"{name}\" alt=\"{name}\"></p>");
    }
    std::fs::write(dir.join("index.html"), html)?;
    let mut ev = String::from("at_s,end_s,kind,detail\n");
    for e in events {
        let _ = writeln!(
            ev,
            "{:.3},{:.3},{},\"{}\"",
            e.at_ms as f64 / 1000.0,
            e.end_ms as f64 / 1000.0,
            e.kind,
            e.detail.replace('"', "'")
        );
    }
    std::fs::write(dir.join("events.csv"), ev)?;
    Ok(dir)
}

fn short(pod: &str) -> &str {
    pod.rsplit('-').next().unwrap_or(pod)
}

fn markdown(
    opts: &Options,
    reqs: &[super::load::Req],
    failures: &[super::load::Failure],
    events: &[Event],
    windows: &[Window],
    checks: &[(String, bool, String)],
) -> String {
    let passed = checks.iter().all(|c| c.1);
    let mut s = format!(
        "# dco soak: {}\n\nseed {} · {} s · {} targets × {} untouched objects · a request per target every {} ms · memory judged from {} s (replay: `hack/soak --duration {}s --seed {}`)\n\n| check | result | numbers |\n|---|---|---|\n",
        if passed { "PASSED" } else { "FAILED" },
        opts.seed,
        opts.duration.as_secs(),
        opts.targets,
        opts.objects,
        opts.period.as_millis(),
        opts.warmup.as_secs(),
        opts.duration.as_secs(),
        opts.seed
    );
    for (what, ok, detail) in checks {
        let _ = writeln!(
            s,
            "| {what} | {} | {} |",
            if *ok { "ok" } else { "**FAILED**" },
            detail.replace('|', "\\|").replace('\n', " ")
        );
    }
    let mut by_op: BTreeMap<String, (u64, u64, Vec<u32>)> = BTreeMap::new();
    for r in reqs {
        let e = by_op.entry(format!("{:?}", r.op)).or_default();
        e.0 += 1;
        e.1 += u64::from(!r.ok);
        e.2.push(r.latency_us);
    }
    s.push_str("\n| requests | count | failed | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n");
    for (op, (n, f, mut l)) in by_op {
        l.sort_unstable();
        let (a, b, c) = quantiles(&l);
        let _ = writeln!(
            s,
            "| {op} | {n} | {f} | {:.1} | {:.1} | {:.1} |",
            a as f64 / 1000.0,
            b as f64 / 1000.0,
            c as f64 / 1000.0
        );
    }
    let mut kinds: BTreeMap<&str, (u32, f64)> = BTreeMap::new();
    for e in events {
        let k = kinds.entry(&e.kind).or_default();
        k.0 += 1;
        k.1 += (e.end_ms - e.at_ms) as f64 / 1000.0;
    }
    s.push_str("\n| event | count | total s |\n|---|---|---|\n");
    for (k, (n, secs)) in kinds {
        let _ = writeln!(s, "| {k} | {n} | {secs:.1} |");
    }
    let _ = writeln!(
        s,
        "\n{} SIGKILL windows (from the signal until {} ms after the Pod was seen unready; a failure counts in one when its request was in flight at some moment of it).",
        windows.len(),
        super::NOT_READY_PROPAGATION.as_millis()
    );
    if !failures.is_empty() {
        s.push_str("\n| at s | failure | counted |\n|---|---|---|\n");
        for f in failures.iter().take(50) {
            let counted = if f.wrong {
                "wrong"
            } else if f.excused(windows) {
                "in a window"
            } else {
                "**outside**"
            };
            let _ = writeln!(
                s,
                "| {:.1} | {} | {counted} |",
                f.at_ms as f64 / 1000.0,
                f.what.replace('|', "\\|").replace('\n', " ")
            );
        }
    }
    s.push_str("\n| at s | took s | event | detail |\n|---|---|---|---|\n");
    for e in events {
        let _ = writeln!(
            s,
            "| {:.1} | {:.1} | {} | {} |",
            e.at_ms as f64 / 1000.0,
            (e.end_ms - e.at_ms) as f64 / 1000.0,
            e.kind,
            e.detail.replace('|', "\\|")
        );
    }
    s.push_str("\nPlots: requests.svg, latency.svg, failures.svg, events.svg, memory.svg (index.html shows them all).\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_is_an_svg_with_one_polyline_per_series_and_a_mark_per_event() {
        let series = [
            Series { name: "a".into(), points: vec![(0.0, 1.0), (10.0, 3.0)] },
            Series { name: "b<".into(), points: vec![(0.0, 2.0), (10.0, 0.0)] },
        ];
        let ev = [Event { at_ms: 5000, end_ms: 6000, kind: "pin".into(), detail: "x → y".into() }];
        let svg = plot("t", "u", 10.0, &series, &ev);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("b&lt;"), "names are escaped");
        assert!(svg.contains("+5.0s pin: x → y"));
        let tl = timeline(10.0, &ev);
        assert_eq!(tl.matches("<rect").count(), 3, "background, one event, the frame");
    }

    #[test]
    fn steps_are_round_and_quantiles_pick_the_ranks() {
        assert_eq!(step(300.0, 8.0), 50.0);
        assert_eq!(step(7.0, 4.0), 2.0);
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(quantiles(&v), (51, 99, 100));
        assert_eq!(quantiles(&[]), (0, 0, 0));
    }
}
