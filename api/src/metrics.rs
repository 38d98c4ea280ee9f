//! What the `/metrics` of both binaries share (docs/operations.md, "Metrics"): every family is
//! listed before its first sample, the process's own resource use and version, and the naming
//! rules and the documented table, checked against what a registry really exposes.
//!
//! prometheus-client leaves a family out of the exposition until it has a sample
//! (`Registry::encode` skips `EncodeMetric::is_empty`), so a dashboard or an alert naming a
//! failure counter would find nothing on a healthy process, and nothing would tell a typo
//! from "no failure yet". [`register`] wraps each family in [`Listed`], which is never empty:
//! its `# HELP` and `# TYPE` are always there.

use std::collections::{BTreeMap, BTreeSet};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// A metric whose descriptor is exposed even without samples.
#[derive(Debug)]
pub struct Listed<M>(pub M);

impl<M: EncodeMetric> EncodeMetric for Listed<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        false
    }
}

/// `registry.register`, listed from the start (a clone of a family shares its samples).
pub fn register<M>(registry: &mut Registry, name: &str, help: &str, metric: M)
where
    M: EncodeMetric + std::fmt::Debug + Send + Sync + 'static,
{
    registry.register(name, help, Listed(metric));
}

/// Encodes `family` under `name` from a [`Collector`]: its descriptor even when it is empty.
pub fn encode_family<S, M, C>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    family: &Family<S, M, C>,
) -> Result<(), std::fmt::Error>
where
    Family<S, M, C>: EncodeMetric,
{
    let metric = encoder.encode_descriptor(name, help, None, family.metric_type())?;
    family.encode(metric)
}

/// `build_info{version}`, and the process's resident memory, CPU time and start time, read
/// from `/proc/self` at each scrape (the families stay listed where `/proc` is missing).
#[derive(Debug)]
pub struct Process {
    pub version: &'static str,
}

/// Registers [`Process`] (`<prefix>_build_info`, `<prefix>_process_*`).
pub fn register_process(registry: &mut Registry, version: &'static str) {
    registry.register_collector(Box::new(Process { version }));
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

/// What `/proc/self/stat` says, in base units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcStat {
    pub resident_bytes: u64,
    pub cpu_seconds: f64,
    pub start_time_seconds: f64,
}

/// Parses `/proc/self/stat` (`proc_pid_stat(5)`): the command may hold spaces and
/// parentheses, so fields are counted from the last `)`. `boot_time` is `btime` of
/// `/proc/stat`; `ticks` and `page` are `_SC_CLK_TCK` and `_SC_PAGESIZE`.
pub fn parse_stat(stat: &str, boot_time: u64, ticks: u64, page: u64) -> Option<ProcStat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the command.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    let (utime, stime, start, rss) = (field(14)?, field(15)?, field(22)?, field(24)?);
    let ticks = ticks.max(1) as f64;
    Some(ProcStat {
        resident_bytes: rss.saturating_mul(page),
        cpu_seconds: (utime + stime) as f64 / ticks,
        start_time_seconds: boot_time as f64 + start as f64 / ticks,
    })
}

fn read_proc() -> Option<ProcStat> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    let btime = boot.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let (ticks, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
    parse_stat(&stat, btime, u64::try_from(ticks).ok()?, u64::try_from(page).ok()?)
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let build = Family::<VersionLabel, prometheus_client::metrics::gauge::Gauge>::default();
        build.get_or_create(&VersionLabel { version: self.version }).set(1);
        encode_family(&mut encoder, "build_info", "1, labelled with this binary's version", &build)?;
        let stat = read_proc();
        let m = encoder.encode_descriptor(
            "process_resident_memory_bytes",
            "Resident memory of this process (RSS)",
            None,
            MetricType::Gauge,
        )?;
        if let Some(s) = stat {
            ConstGauge::new(i64::try_from(s.resident_bytes).unwrap_or(i64::MAX)).encode(m)?;
        }
        let m = encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time this process used",
            None,
            MetricType::Counter,
        )?;
        if let Some(s) = stat {
            ConstCounter::new(s.cpu_seconds).encode(m)?;
        }
        let m = encoder.encode_descriptor(
            "process_start_time_seconds",
            "When this process started, in seconds since the Unix epoch",
            None,
            MetricType::Gauge,
        )?;
        if let Some(s) = stat {
            ConstGauge::new(s.start_time_seconds).encode(m)?;
        }
        Ok(())
    }
}

/// One family of an exposition, as a scraper sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exposed {
    pub name: String,
    /// `counter`, `gauge`, `histogram`, `info`, `unknown` (the `# TYPE`).
    pub kind: String,
    pub help: String,
    /// Label names of its samples (`le` of histogram buckets left out).
    pub labels: BTreeSet<String>,
    pub samples: usize,
}

impl Exposed {
    /// The series names a query can use: a counter `F` is `F_total`, a histogram `F` is
    /// `F_bucket`, `F_sum` and `F_count`.
    pub fn series(&self) -> Vec<String> {
        let n = &self.name;
        match self.kind.as_str() {
            "counter" => vec![format!("{n}_total")],
            "histogram" => vec![format!("{n}_bucket"), format!("{n}_sum"), format!("{n}_count")],
            "info" => vec![format!("{n}_info")],
            _ => vec![n.clone()],
        }
    }

    /// The name the docs' table uses: what one queries (`F_total` for a counter, `F` else).
    pub fn documented_name(&self) -> String {
        match self.kind.as_str() {
            "counter" => format!("{}_total", self.name),
            _ => self.name.clone(),
        }
    }
}

/// The families of a text exposition (OpenMetrics, or Prometheus' text format), in order.
pub fn parse_exposition(text: &str) -> Vec<Exposed> {
    let mut out: Vec<Exposed> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut family = |out: &mut Vec<Exposed>, name: &str| -> usize {
        *index.entry(name.to_string()).or_insert_with(|| {
            out.push(Exposed { name: name.to_string(), kind: "unknown".into(), ..Exposed::default() });
            out.len() - 1
        })
    };
    let mut current: Option<usize> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (what, name, value) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
            let Some(name) = name else { continue };
            match what {
                Some("TYPE") => {
                    let i = family(&mut out, name);
                    out[i].kind = value.trim().to_string();
                    current = Some(i);
                }
                Some("HELP") => {
                    let i = family(&mut out, name);
                    out[i].help = value.to_string();
                    current = Some(i);
                }
                _ => {}
            }
            continue;
        }
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        // A sample belongs to the family just described when its name is one of that
        // family's series; otherwise it is a family of its own (untyped).
        let i = match current {
            Some(i) if sample_of(&out[i], name) => i,
            _ => family(&mut out, name),
        };
        out[i].samples += 1;
        if line[name_end..].starts_with('{') {
            for l in label_names(&line[name_end + 1..]) {
                if !(l == "le" && out[i].kind == "histogram") {
                    out[i].labels.insert(l);
                }
            }
        }
    }
    out
}

fn sample_of(f: &Exposed, sample: &str) -> bool {
    sample == f.name
        || f.series().iter().any(|s| s == sample)
        || (f.kind == "counter" && sample == format!("{}_created", f.name))
}

/// The label names of `a="x",b="y\"z"}...`.
fn label_names(s: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let name = name.trim().trim_start_matches(',').trim();
        if name.is_empty() || name.starts_with('}') {
            break;
        }
        names.push(name.to_string());
        if chars.next() != Some('"') {
            break;
        }
        let mut escaped = false;
        for c in chars.by_ref() {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => break,
                _ => escaped = false,
            }
        }
        match chars.peek() {
            Some(',') => {
                chars.next();
            }
            _ => break,
        }
    }
    names
}

/// Label names that name a single object, or that Prometheus' own target labels would
/// rename to `exported_*` (docs/operations.md, "Metrics").
pub const FORBIDDEN_LABELS: &[&str] = &["name", "uid", "object", "namespace", "pod", "instance", "job"];

/// Where each family of `families` (those under `prefix`) breaks the naming rules of
/// docs/operations.md: the prefix, snake_case names, base units (`_seconds`, `_bytes`), no
/// `_total` on anything but a counter's sample, a unit on every histogram and on every
/// duration or timestamp, snake_case label names outside [`FORBIDDEN_LABELS`], a help text.
pub fn convention_problems(families: &[Exposed], prefix: &str) -> Vec<String> {
    let snake = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !s.contains("__")
            && !s.ends_with('_')
    };
    let mut problems = Vec::new();
    for f in families {
        let n = &f.name;
        let mut bad = |why: String| problems.push(format!("{n}: {why}"));
        if !n.starts_with(&format!("{prefix}_")) {
            bad(format!("does not start with {prefix}_"));
        }
        if !snake(n) {
            bad("is not snake_case".into());
        }
        if n.ends_with("_total") {
            bad("ends in _total: only a counter's sample does, and the encoder adds it".into());
        }
        if !matches!(f.kind.as_str(), "counter" | "gauge" | "histogram" | "info") {
            bad(format!("has type {:?}, not counter, gauge, histogram or info", f.kind));
        }
        let words: Vec<&str> = n.split('_').collect();
        for non_base in [
            "milliseconds",
            "ms",
            "microseconds",
            "us",
            "minutes",
            "hours",
            "days",
            "kb",
            "mb",
            "kib",
            "mib",
            "gib",
        ] {
            if words.contains(&non_base) {
                bad(format!("uses the unit {non_base}: use a base unit (seconds, bytes)"));
            }
        }
        let timed = ["duration", "latency", "time", "age", "elapsed", "timestamp", "since"]
            .iter()
            .any(|w| words.contains(w));
        if timed && !n.ends_with("_seconds") {
            bad("measures time but does not end in _seconds".into());
        }
        if f.kind == "histogram" && !(n.ends_with("_seconds") || n.ends_with("_bytes")) {
            bad("is a histogram without a base unit (_seconds or _bytes)".into());
        }
        // prometheus-client ends every help with a full stop.
        if f.help.trim().trim_end_matches('.').trim().is_empty() {
            bad("has no # HELP".into());
        }
        for l in &f.labels {
            if !snake(l) {
                bad(format!("label {l:?} is not snake_case"));
            }
            if FORBIDDEN_LABELS.contains(&l.as_str()) {
                bad(format!("label {l:?} names one object or clashes with a Prometheus target label"));
            }
        }
    }
    problems
}

/// One row of the metrics tables of docs/operations.md.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Documented {
    pub name: String,
    pub kind: String,
    pub labels: BTreeSet<String>,
}

/// The rows `` | `name` | type | `label`, `label` | meaning | `` of `markdown` whose name
/// starts with `prefix`.
pub fn documented(markdown: &str, prefix: &str) -> Vec<Documented> {
    let ticked =
        |cell: &str| -> Vec<String> { cell.split('`').skip(1).step_by(2).map(str::to_string).collect() };
    markdown
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim().strip_prefix('|')?.split('|').map(str::trim).collect();
            let name = ticked(cells.first()?).into_iter().next()?;
            if !name.starts_with(&format!("{prefix}_")) || cells.len() < 4 {
                return None;
            }
            let labels = ticked(cells[2]).into_iter().filter(|l| !l.contains('=')).collect();
            Some(Documented { name, kind: cells[1].to_string(), labels })
        })
        .collect()
}

/// Where the exposed families under `prefix` and the documented rows disagree: an exposed
/// family the table does not list, or with another type, or with a label the table does not
/// name; a row nothing exposes.
pub fn compare_with_docs(exposed: &[Exposed], docs: &[Documented], prefix: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let by_name: BTreeMap<&str, &Documented> = docs.iter().map(|d| (d.name.as_str(), d)).collect();
    let mut seen = BTreeSet::new();
    for f in exposed.iter().filter(|f| f.name.starts_with(&format!("{prefix}_"))) {
        let name = f.documented_name();
        seen.insert(name.clone());
        let Some(d) = by_name.get(name.as_str()) else {
            problems.push(format!("{name} ({}) is exported but not documented", f.kind));
            continue;
        };
        if d.kind != f.kind {
            problems.push(format!("{name} is a {} but documented as a {}", f.kind, d.kind));
        }
        for l in f.labels.difference(&d.labels) {
            problems.push(format!("{name} has label {l:?}, which the table does not name"));
        }
    }
    for d in docs.iter().filter(|d| !seen.contains(&d.name)) {
        problems.push(format!("{} is documented but not exported", d.name));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::histogram::Histogram;

    #[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
    struct Target {
        target: String,
    }

    fn encode(r: &Registry) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, r).unwrap();
        s
    }

    #[test]
    fn a_listed_family_is_exposed_before_its_first_sample() {
        let mut r = Registry::with_prefix("dco_x");
        let plain = Family::<Target, Counter>::default();
        let listed = Family::<Target, Counter>::default();
        r.register("plain", "not listed", plain.clone());
        register(&mut r, "failures", "Failures, by target", listed.clone());
        let text = encode(&r);
        assert!(!text.contains("dco_x_plain"), "{text}");
        assert!(text.contains("# TYPE dco_x_failures counter"), "{text}");
        assert!(text.contains("# HELP dco_x_failures Failures, by target"), "{text}");
        listed.get_or_create(&Target { target: "a.example.org".into() }).inc();
        let fams = parse_exposition(&encode(&r));
        let f = fams.iter().find(|f| f.name == "dco_x_failures").unwrap();
        assert_eq!((f.kind.as_str(), f.samples), ("counter", 1));
        assert_eq!(f.labels, BTreeSet::from(["target".to_string()]));
        assert_eq!(f.series(), ["dco_x_failures_total"]);
    }

    #[test]
    fn the_process_collector_reads_this_process() {
        let mut r = Registry::with_prefix("dco_x");
        register_process(&mut r, "1.2.3");
        let text = encode(&r);
        assert!(text.contains(r#"dco_x_build_info{version="1.2.3"} 1"#), "{text}");
        let fams = parse_exposition(&text);
        let get = |n: &str| fams.iter().find(|f| f.name == n).unwrap_or_else(|| panic!("{n} in\n{text}"));
        assert_eq!(get("dco_x_process_cpu_seconds").kind, "counter");
        assert_eq!(get("dco_x_process_resident_memory_bytes").samples, 1, "{text}");
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("dco_x_process_resident_memory_bytes "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(rss > 1e6, "a test process is more than 1 MB resident: {rss}");
        let start: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("dco_x_process_start_time_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(start <= now + 1.0 && start > now - 86_400.0, "started {start}, now {now}");
        assert!(convention_problems(&fams, "dco_x").is_empty(), "{:?}", convention_problems(&fams, "dco_x"));
    }

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command with spaces and a ')' of its own; utime 250, stime 50, start 1000 ticks,
        // rss 300 pages.
        // Fields 3 to 24.
        let mut f = vec!["0"; 22];
        f[14 - 3] = "250";
        f[15 - 3] = "50";
        f[22 - 3] = "1000";
        f[24 - 3] = "300";
        let stat = format!("42 (a b) c) {}", f.join(" "));
        let s = parse_stat(&stat, 1_700_000_000, 100, 4096).unwrap();
        assert_eq!(s.resident_bytes, 300 * 4096);
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert_eq!(parse_stat("42 (x) S 1 2", 0, 100, 4096), None);
    }

    #[test]
    fn conventions_name_each_breach() {
        let mut r = Registry::with_prefix("dco_x");
        // prometheus-client refuses a counter named so; a gauge it takes.
        register(&mut r, "requests_total", "a", prometheus_client::metrics::gauge::Gauge::<i64>::default());
        register(&mut r, "latency", "b", Histogram::new([1.0]));
        register(
            &mut r,
            "move_age_milliseconds",
            "c",
            prometheus_client::metrics::gauge::Gauge::<i64>::default(),
        );
        let g = Family::<BadLabel, prometheus_client::metrics::gauge::Gauge>::default();
        g.get_or_create(&BadLabel { name: "x".into() }).set(1);
        register(&mut r, "ok", "d", g);
        let mut other = Registry::with_prefix("other");
        register(&mut other, "thing", "", Counter::<u64>::default());
        let mut fams = parse_exposition(&encode(&r));
        fams.extend(parse_exposition(&encode(&other)));
        let p = convention_problems(&fams, "dco_x").join("\n");
        for needle in [
            "dco_x_requests_total: ends in _total",
            "dco_x_latency: measures time but does not end in _seconds",
            "dco_x_latency: is a histogram without a base unit",
            "dco_x_move_age_milliseconds: uses the unit milliseconds",
            r#"dco_x_ok: label "name" names one object"#,
            "other_thing: does not start with dco_x_",
            "other_thing: has no # HELP",
        ] {
            assert!(p.contains(needle), "missing {needle:?} in\n{p}");
        }
        assert!(!p.contains("dco_x_ok: is not"), "{p}");
    }

    #[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
    struct BadLabel {
        name: String,
    }

    #[test]
    fn the_docs_table_is_compared_both_ways() {
        let md = "| metric | type | labels | meaning |\n|---|---|---|---|\n\
                  | `dco_x_failures_total` | counter | `target` | failures |\n\
                  | `dco_x_gone` | gauge | — | nothing exports it |\n\
                  | `dco_x_ready` | counter | | wrong type |\n";
        let docs = documented(md, "dco_x");
        assert_eq!(docs.len(), 3);
        let mut r = Registry::with_prefix("dco_x");
        let f = Family::<BadLabel, Counter>::default();
        f.get_or_create(&BadLabel { name: "n".into() }).inc();
        register(&mut r, "failures", "f", f);
        register(&mut r, "ready", "r", prometheus_client::metrics::gauge::Gauge::<i64>::default());
        register(&mut r, "new", "n", prometheus_client::metrics::gauge::Gauge::<i64>::default());
        let p = compare_with_docs(&parse_exposition(&encode(&r)), &docs, "dco_x").join("\n");
        for needle in [
            r#"dco_x_failures_total has label "name", which the table does not name"#,
            "dco_x_ready is a gauge but documented as a counter",
            "dco_x_new (gauge) is exported but not documented",
            "dco_x_gone is documented but not exported",
        ] {
            assert!(p.contains(needle), "missing {needle:?} in\n{p}");
        }
    }

    #[test]
    fn label_names_survive_escaped_quotes_and_commas() {
        let fams =
            parse_exposition("# TYPE m gauge\n# HELP m h\nm{a=\"x,\\\"y\\\"\",b_c=\"}\"} 1\nm 2\n# EOF\n");
        assert_eq!(fams.len(), 1);
        assert_eq!(fams[0].labels, BTreeSet::from(["a".to_string(), "b_c".to_string()]));
        assert_eq!(fams[0].samples, 2);
    }
}
