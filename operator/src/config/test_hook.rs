//! A test-only pause point before a target's spec.conversion write, for the end-to-end test
//! of a replica stopped in the middle of a move (tests/tests/sharding_operator_pause.rs;
//! docs/sharding.md, "After a pause"): with `DCO_TEST_PAUSE_BEFORE=conversion-write:<target>`
//! a **debug build** logs [`LINE`] and waits [`WAIT`] before its first write that moves
//! `<target>` from one webhook Service to another, so the test can SIGSTOP it right there.
//! Release builds (the images) ignore the variable; the first move of the named target is
//! the only one held, once per process.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The variable, and the one pause point it can name.
pub const ENV: &str = "DCO_TEST_PAUSE_BEFORE";
const POINT: &str = "conversion-write:";
/// The log line's message, which the test waits for.
pub const LINE: &str = "test hook: pausing before the spec.conversion write";
/// How long the hook waits: time for the test to stop the process (a stopped process's
/// timer has long passed when it resumes, so it goes on at once then).
pub const WAIT: Duration = Duration::from_secs(10);

/// The target named, when this build honours the variable and it is well formed.
fn named(value: Option<&str>, debug: bool) -> Option<&str> {
    let target = value?.strip_prefix(POINT)?.trim();
    (debug && !target.is_empty()).then_some(target)
}

/// Whether a write of `target`'s spec.conversion is the held one: the named target, moved
/// between two webhook Services (`from` is wired now, `to` is written), the first time.
fn holds(
    named: Option<&str>,
    target: &str,
    from: Option<(&str, &str)>,
    to: Option<(&str, &str)>,
    fired: &AtomicBool,
) -> bool {
    named == Some(target)
        && from.is_some()
        && to.is_some()
        && from != to
        && !fired.swap(true, Ordering::SeqCst)
}

/// Waits [`WAIT`] before the held write (see the module's doc); nothing otherwise.
pub async fn before_conversion_write(target: &str, from: Option<(&str, &str)>, to: Option<(&str, &str)>) {
    static NAMED: OnceLock<Option<String>> = OnceLock::new();
    static FIRED: AtomicBool = AtomicBool::new(false);
    let named = NAMED.get_or_init(|| {
        let value = std::env::var(ENV).ok();
        let named = named(value.as_deref(), cfg!(debug_assertions)).map(str::to_string);
        if let Some(t) = &named {
            tracing::warn!(
                "{ENV} is set: this process stops its first move of {t} for {WAIT:?} (a test hook)"
            );
        }
        named
    });
    if holds(named.as_deref(), target, from, to, &FIRED) {
        tracing::warn!(name = target, ?from, ?to, "{LINE}");
        tokio::time::sleep(WAIT).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_debug_build_with_the_point_and_a_target_named_holds_and_only_its_first_move() {
        assert_eq!(named(Some("conversion-write:widgets.example.org"), true), Some("widgets.example.org"));
        assert_eq!(named(Some("conversion-write:widgets.example.org"), false), None, "release builds");
        assert_eq!(named(Some("conversion-write:"), true), None);
        assert_eq!(named(Some("status-write:widgets.example.org"), true), None);
        assert_eq!(named(None, true), None);
        let fired = AtomicBool::new(false);
        let (a, b) = (Some(("ns", "a")), Some(("ns", "b")));
        let t = Some("widgets.example.org");
        assert!(!holds(t, "other.example.org", a, b, &fired), "another target");
        assert!(!holds(t, "widgets.example.org", None, b, &fired), "a first wiring is no move");
        assert!(!holds(t, "widgets.example.org", a, None, &fired), "an unwiring is no move");
        assert!(!holds(t, "widgets.example.org", a, a, &fired), "a refresh is no move");
        assert!(!holds(None, "widgets.example.org", a, b, &fired));
        assert!(holds(t, "widgets.example.org", a, b, &fired));
        assert!(!holds(t, "widgets.example.org", b, a, &fired), "once per process");
    }
}
