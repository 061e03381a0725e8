//! Property tests of every parser gpuslack reads user input with: traces, the facts beside
//! them, labels, profiles, the config file, header lists and single headers, and the pipeline
//! behind them. Whatever the input: no panic, and an error names its place (file, line, field)
//! and never shows a header's value.

use gpuslack_calibration::ProfileFile;
use gpuslack_receiver::export::config::{check_header, file_layer_from_str, parse_pairs};
use gpuslack_receiver::score::Labels;
use gpuslack_receiver::trace::{BinaryTraceWriter, SampleWriter, TraceFacts, TraceReader};
use gpuslack_receiver::{Diagnoser, Metric, Pipeline, Sample};
use proptest::prelude::*;

/// Cells a trace might hold: numbers plain and odd, hex, words, unicode, quotes, empties.
fn cell() -> impl Strategy<Value = String> {
    prop_oneof![
        (0.0f64..1e12).prop_map(|v| v.to_string()),
        (-1e6f64..1e6).prop_map(|v| format!("{v:e}")),
        Just(String::new()),
        Just("nan".into()),
        Just("inf".into()),
        Just("-0".into()),
        Just("1e300".into()),
        Just("0x4".into()),
        Just("0xZZ".into()),
        Just("\"a,b\"".into()),
        "[a-z%é€0-9.]{0,12}",
        any::<u32>().prop_map(|v| v.to_string()),
    ]
}

fn header() -> impl Strategy<Value = Vec<String>> {
    let column = prop_oneof![
        Just("t"),
        Just("gpu"),
        Just("power_mw"),
        Just("util_gpu"),
        Just("gpm_sm"),
        Just("energy_mj"),
        Just("clk_reasons"),
        Just("nvml_pcie_rx"),
        Just("mem_used"),
        Just("unknown_col"),
    ];
    prop::collection::vec(column.prop_map(String::from), 1..7)
}

fn trace_text() -> impl Strategy<Value = String> {
    (
        header(),
        prop::collection::vec(prop::collection::vec(cell(), 0..8), 0..20),
    )
        .prop_map(|(h, rows)| {
            let mut text = h.join(",");
            text.push('\n');
            for row in rows {
                text.push_str(&row.join(","));
                text.push('\n');
            }
            text
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_trace_never_panics_and_its_errors_name_file_and_line(text in trace_text()) {
        match TraceReader::new("in.csv".into(), text.as_bytes()) {
            Err(e) => prop_assert!(e.to_string().starts_with("in.csv"), "{}", e),
            Ok(reader) => {
                let mut pipeline = Pipeline::new(1.0, Diagnoser::default());
                for row in reader {
                    match row {
                        Ok(sample) => {
                            // Out of order or past the GPU cap: an error, never a panic.
                            let _ = pipeline.push(&sample);
                        }
                        Err(e) => {
                            let shown = e.to_string();
                            prop_assert!(shown.starts_with("in.csv:"), "{}", shown);
                            prop_assert!(shown.len() < 400, "{}", shown);
                        }
                    }
                }
                let _ = pipeline.finish();
            }
        }
    }

    #[test]
    fn raw_bytes_as_a_trace_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(reader) = TraceReader::new("raw.csv".into(), bytes.as_slice()) {
            for row in reader {
                if let Err(e) = row {
                    prop_assert!(e.to_string().starts_with("raw.csv"));
                }
            }
        }
    }

    #[test]
    fn a_binary_trace_gives_back_what_was_written_and_damage_never_panics(
        rows in prop::collection::vec(
            (1.0f64..1e10, any::<u32>(), prop::collection::vec((0usize..61, prop_oneof![
                (0.0f64..1e16),
                (0u64..1 << 40).prop_map(|v| v as f64),
                Just(0.0),
                Just(f64::NAN),
            ]), 0..12), prop::option::of(any::<u64>())),
            1..40,
        ),
        flush_every in 1usize..10,
        damage in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut written = Vec::new();
        let mut writer = BinaryTraceWriter::new(Vec::new()).expect("header");
        for (i, (t, gpu, values, clk)) in rows.into_iter().enumerate() {
            let mut s = Sample::new(t, gpu);
            for (m, v) in values {
                let metric = Metric::ALL[m];
                // Percentages within 0–100, as the reader requires.
                s.set(metric, if metric.is_percent() { v % 100.0 } else { v });
            }
            s.clk_reasons = clk;
            writer.write(&s).expect("row");
            if (i + 1) % flush_every == 0 {
                writer.flush().expect("flush");
            }
            // What a reader gives back: a NaN is "not sampled".
            let mut expected = Sample::new(s.t, s.gpu);
            for (m, v) in s.metrics().filter(|(_, v)| !v.is_nan()) {
                expected.set(m, v);
            }
            expected.clk_reasons = s.clk_reasons;
            written.push(expected);
        }
        let bytes = writer.finish().expect("finish");
        let read: Vec<Sample> = TraceReader::new("in.gstrace".into(), bytes.as_slice())
            .expect("header")
            .map(|r| r.expect("a row as written"))
            .collect();
        prop_assert_eq!(read, written);
        // Damaged or cut short anywhere: errors that name the file, and no panic.
        let mut damaged = bytes.clone();
        for (at, byte) in damage {
            let i = at.index(damaged.len());
            damaged[i] ^= byte;
        }
        if let Some(cut) = cut {
            damaged.truncate(cut.index(damaged.len()));
        }
        match TraceReader::new("in.gstrace".into(), damaged.as_slice()) {
            Err(e) => prop_assert!(e.to_string().starts_with("in.gstrace"), "{}", e),
            Ok(reader) => {
                for row in reader {
                    if let Err(e) = row {
                        let shown = e.to_string();
                        prop_assert!(shown.starts_with("in.gstrace"), "{}", shown);
                        prop_assert!(shown.len() < 400, "{}", shown);
                    }
                }
            }
        }
    }

    #[test]
    fn the_pipeline_takes_any_samples_in_order(
        steps in prop::collection::vec((0.0f64..5.0, 0u32..4, prop::option::of(0.0f64..101.0), prop::option::of(0.0f64..1e6)), 1..200)
    ) {
        let mut pipeline = Pipeline::new(2.0, Diagnoser::default()).tolerating_clock_steps();
        let mut t = 1.79e9;
        let mut windows = 0;
        for (dt, gpu, sm, power) in steps {
            t += dt;
            let mut s = Sample::new(t, gpu);
            if let Some(sm) = sm {
                s.set(Metric::GpmSm, sm.min(100.0));
                s.set(Metric::UtilGpu, sm.min(100.0));
            }
            if let Some(p) = power {
                s.set(Metric::PowerMw, p);
            }
            windows += pipeline.push(&s).map(|r| r.len()).unwrap_or(0);
        }
        windows += pipeline.finish().len();
        prop_assert_eq!(windows as u64, pipeline.counts().windows);
    }

    #[test]
    fn facts_never_panic_and_errors_name_the_file(text in facts_text()) {
        if let Err(e) = TraceFacts::from_json(&text, "t.facts.json") {
            prop_assert!(e.to_string().starts_with("t.facts.json: "), "{}", e);
        }
    }

    #[test]
    fn labels_never_panic_and_errors_name_the_file(text in labels_text()) {
        if let Err(e) = Labels::parse(&text, "labels.json") {
            prop_assert!(e.to_string().starts_with("labels.json: "), "{}", e);
        }
    }

    #[test]
    fn profiles_never_panic_and_errors_name_the_file(text in profile_text()) {
        if let Err(e) = ProfileFile::parse(&text, "p.toml") {
            prop_assert!(e.to_string().starts_with("p.toml: "), "{}", e);
        }
    }

    #[test]
    fn the_config_file_never_panics_and_errors_name_it(text in config_text()) {
        if let Err(e) = file_layer_from_str(&text, "gpuslack.toml") {
            prop_assert!(e.to_string().starts_with("gpuslack.toml: "), "{}", e);
        }
    }

    #[test]
    fn header_lists_never_panic(text in "[a-zA-Z0-9=,% é\\-_\\n\\t]{0,60}") {
        let _ = parse_pairs(&text);
    }

    #[test]
    fn a_bad_header_is_named_and_its_value_never_shown(
        name in "[a-zA-Z0-9\\- é:]{1,12}",
        value in "[a-zA-Z0-9 \\n\\r\\t\u{0}é]{0,16}",
    ) {
        if let Err(e) = check_header("flags", &name, &value) {
            let shown = e.to_string();
            prop_assert!(shown.starts_with("flags: `headers`: "), "{}", shown);
            let secret = value.trim();
            if secret.len() >= 4 && !name.contains(secret) {
                prop_assert!(!shown.contains(secret), "{}", shown);
            }
        }
    }
}

fn json_value() -> impl Strategy<Value = String> {
    prop_oneof![
        (-1e9f64..1e9).prop_map(|v| v.to_string()),
        Just("0".into()),
        Just("-5".into()),
        Just("null".into()),
        Just("true".into()),
        Just("\"x\"".into()),
        Just("[]".into()),
        Just("{}".into()),
        Just("1e999".into()),
    ]
}

fn facts_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("name"),
        Just("uuid"),
        Just("power_limit_default_mw"),
        Just("power_limit_enforced_mw"),
        Just("temp_slowdown_c"),
        Just("mem_total"),
        Just("mig_parent_gpu"),
        Just("gpus"),
    ];
    prop::collection::vec((key, json_value()), 0..6).prop_map(|pairs| {
        let body: Vec<String> = pairs.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
        format!("{{{}}}", body.join(", "))
    })
}

fn labels_text() -> impl Strategy<Value = String> {
    let segment = (0u32..3, json_value(), json_value(), "[a-z_]{0,10}").prop_map(
        |(gpu, start, end, class)| {
            format!(
                "{{\"gpu\": {gpu}, \"start\": {start}, \"end\": {end}, \"scenario\": \"s\", \"accept\": [\"{class}\"]}}"
            )
        },
    );
    (json_value(), prop::collection::vec(segment, 0..4)).prop_map(|(tdp, segs)| {
        format!("{{\"tdp_w\": {tdp}, \"segments\": [{}]}}", segs.join(", "))
    })
}

fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        (-1e6f64..1e6).prop_map(|v| format!("{v:?}")),
        Just("nan".into()),
        Just("inf".into()),
        Just("-1.0".into()),
        Just("\"text\"".into()),
        Just("true".into()),
        Just("[]".into()),
    ]
}

fn profile_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("date"),
        Just("source"),
        Just("idle_w"),
        Just("held_idle_w"),
        Just("memory_w"),
        Just("tdp_w"),
        Just("idel_w"),
    ];
    prop::collection::vec((key, toml_value()), 0..6).prop_map(|pairs| {
        let mut text = String::from("[[gpu]]\n");
        let mut seen = std::collections::BTreeSet::new();
        for (k, v) in pairs {
            if seen.insert(k) {
                text.push_str(&format!("{k} = {v}\n"));
            }
        }
        text
    })
}

fn config_text() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just(("otlp", "endpoint")),
        Just(("otlp", "protocol")),
        Just(("otlp", "timeout_ms")),
        Just(("otlp", "interval_ms")),
        Just(("otlp", "temporality")),
        Just(("otlp", "preset")),
        Just(("otlp", "compression")),
        Just(("prometheus", "listen")),
        Just(("resource", "service_name")),
        Just(("otlp", "endpont")),
    ];
    prop::collection::vec((key, toml_value()), 0..5).prop_map(|pairs| {
        let mut by_table: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
        let mut seen = std::collections::BTreeSet::new();
        for ((table, k), v) in pairs {
            if seen.insert((table, k)) {
                by_table
                    .entry(table)
                    .or_default()
                    .push(format!("{k} = {v}"));
            }
        }
        by_table
            .into_iter()
            .map(|(t, lines)| format!("[{t}]\n{}\n", lines.join("\n")))
            .collect()
    })
}
