//! Status conditions: set one by type, keeping `lastTransitionTime` unless the status flips
//! (so `kubectl describe` shows when something last changed, not when it was last looked at).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Kubernetes caps `message` at 32768 characters.
const MAX_MESSAGE: usize = 32_000;

pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Timestamp,
) {
    let status = if status { "True" } else { "False" }.to_string();
    let mut message: String = message.into();
    if message.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str(" …");
    }
    // Reasons must match the apiserver's pattern; the machine's reasons always do, but a
    // fallback keeps a typo from failing the whole status write.
    let reason = if reason.is_empty() { "Unknown".to_string() } else { reason.to_string() };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Time(now);
            }
            c.status = status;
            c.reason = reason;
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status,
            reason,
            message,
            observed_generation: generation,
            last_transition_time: Time(now),
        }),
    }
}

pub fn remove(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions.iter().any(|c| c.type_ == type_ && c.status == "True")
}

pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_a_flip() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let mut c = Vec::new();
        set(&mut c, "Available", false, "NoReplicas", "0 of 2 ready", Some(1), t0);
        set(&mut c, "Available", false, "NoReplicas", "1 of 2 ready", Some(1), t1);
        assert_eq!(c[0].last_transition_time, Time(t0));
        assert_eq!(c[0].message, "1 of 2 ready");
        set(&mut c, "Available", true, "Ready", "2 of 2 ready", Some(2), t1);
        assert_eq!(c[0].last_transition_time, Time(t1));
        assert!(is_true(&c, "Available"));
        assert_eq!(c.len(), 1);
        remove(&mut c, "Available");
        assert!(c.is_empty());
    }
}
