//! Attribute keys and values as Prometheus labels, by the OpenTelemetry → Prometheus
//! compatibility rules: a key's characters outside `[a-zA-Z0-9_]` become `_`, runs of `_`
//! collapse to one, a key that starts with a digit gets `key_` in front and one that starts
//! with `__` (Prometheus reserves those) gets `key`; `le` and `quantile`, which Prometheus reads
//! as a histogram's bucket bound and a summary's quantile (an attribute named `le` failed
//! `promtool check metrics`), become `key_le` and `key_quantile`; keys that meet after that have their values
//! joined with `;` in the order of the original keys. Values are escaped. Whatever attribute a
//! user sets (`OTEL_RESOURCE_ATTRIBUTES=team/owner=ml`, a Kubernetes label, unicode), the
//! exposition stays one that Prometheus accepts: one bad name would fail the whole scrape and
//! mark the target down.

use std::collections::BTreeMap;

/// `key` as a valid Prometheus label name.
pub fn label_name(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    // `__x` collapsed to `_x` above: Prometheus reserves `__`, so such a key is marked as one.
    if key.starts_with("__") {
        return format!("key_{}", out.trim_start_matches('_'));
    }
    match out.chars().next() {
        None => "key_".into(),
        Some(c) if c.is_ascii_digit() => format!("key_{out}"),
        _ if RESERVED.contains(&out.as_str()) => format!("key_{out}"),
        _ => out,
    }
}

/// Label names Prometheus gives a meaning of its own on any series.
const RESERVED: [&str; 2] = ["le", "quantile"];

/// A label value with `\`, `"` and line feeds escaped, as the text formats require, after the
/// outside text in it is made safe to show ([`crate::text::exported`]): a pod, process or
/// resource attribute's ESC, BEL, CR, NUL, C1 control or bidi mark reaches the exposition as
/// its visible escape (`\x1b`, `\u{202e}`), so `curl host:9464/metrics` in a terminal runs
/// none of them.
pub fn label_value(value: &str) -> String {
    let value = crate::text::exported(value);
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// `pairs` as a label set `{k="v",…}`: names sanitised, values that land on one name joined
/// with `;` in the order of their original keys, then `extra` (labels of the exporter's own,
/// such as `otel_scope_name`), which take part in the joining like any other key.
pub fn label_set<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    extra: &[(&'a str, &'a str)],
) -> String {
    // name → (original key, value), sorted by original key for the join.
    let mut by_name: BTreeMap<String, Vec<(&str, &str)>> = BTreeMap::new();
    for (key, value) in pairs.into_iter().chain(extra.iter().copied()) {
        by_name
            .entry(label_name(key))
            .or_default()
            .push((key, value));
    }
    let mut out = String::from("{");
    for (i, (name, mut values)) in by_name.into_iter().enumerate() {
        values.sort_by(|a, b| a.0.cmp(b.0));
        let joined: Vec<&str> = values.iter().map(|(_, v)| *v).collect();
        if i > 0 {
            out.push(',');
        }
        out.push_str(&name);
        out.push_str("=\"");
        out.push_str(&label_value(&joined.join(";")));
        out.push('"');
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_valid_whatever_the_key() {
        for (key, name) in [
            ("hw.id", "hw_id"),
            ("k8s.pod.name", "k8s_pod_name"),
            ("team/owner", "team_owner"),
            ("app.kubernetes.io/name", "app_kubernetes_io_name"),
            ("a..b--c", "a_b_c"),
            ("équipe", "_quipe"),
            ("0day", "key_0day"),
            ("__name__", "key_name_"),
            ("_private", "_private"),
            ("", "key_"),
            ("ok_Name9", "ok_Name9"),
            ("le", "key_le"),
            ("quantile", "key_quantile"),
            ("__meta_x", "key_meta_x"),
            // Only the exact names: others that contain them are fine.
            ("le_x", "le_x"),
            ("model.quantile", "model_quantile"),
            ("LE", "LE"),
        ] {
            assert_eq!(label_name(key), name, "{key:?}");
        }
    }

    #[test]
    fn values_are_escaped_and_unicode_kept() {
        assert_eq!(label_value("a \"b\"\\c\nd"), "a \\\"b\\\"\\\\c\\nd");
        assert_eq!(label_value("ml/é 🚀"), "ml/é 🚀");
        // Outside text's controls and bidi marks reach the exposition as visible escapes.
        assert_eq!(
            label_value("pod\u{1b}]52;c;eA==\u{7}\r\0\u{9b}x\u{202e}y"),
            "pod\\\\x1b]52;c;eA==\\\\x07\\\\r\\\\x00\\\\u{9b}x\\\\u{202e}y"
        );
    }

    #[test]
    fn keys_that_meet_join_their_values_in_the_order_of_the_original_keys() {
        let set = label_set(
            [("team/owner", "b"), ("team.owner", "a"), ("host.name", "n")],
            &[("otel_scope_name", "gpuslack")],
        );
        // "team.owner" < "team/owner" ('.' sorts before '/')
        assert_eq!(
            set,
            "{host_name=\"n\",otel_scope_name=\"gpuslack\",team_owner=\"a;b\"}"
        );
        let clash = label_set(
            [("otel.scope.name", "user")],
            &[("otel_scope_name", "gpuslack")],
        );
        assert_eq!(clash, "{otel_scope_name=\"user;gpuslack\"}");
        assert_eq!(label_set([], &[]), "{}");
    }
}
