//! The two text formats `/metrics` serves (OpenMetrics 1.0 and the Prometheus text format
//! 0.0.4), the choice between them from an `Accept` header, and the conversion.

/// The two text formats `/metrics` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposition {
    /// `application/openmetrics-text; version=1.0.0`
    OpenMetrics,
    /// `text/plain; version=0.0.4`, the classic Prometheus format (`promtool check metrics`).
    PrometheusText,
}

impl Exposition {
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Exposition::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// Choose the format from an `Accept` header: the media range with the highest `q` among
/// `application/openmetrics-text` and `text/plain` wins (OpenMetrics on a tie); no header,
/// `*/*` or nothing recognised means OpenMetrics.
pub fn negotiate(accept: Option<&str>) -> Exposition {
    let Some(accept) = accept else { return Exposition::OpenMetrics };
    let mut best: Option<(f32, Exposition)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut q = 1.0f32;
        for p in parts {
            if let Some(v) = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")) {
                q = v.trim().parse().unwrap_or(0.0);
            }
        }
        let format = match media.as_str() {
            "application/openmetrics-text" => Exposition::OpenMetrics,
            "text/plain" => Exposition::PrometheusText,
            _ => continue,
        };
        let better = match best {
            None => q > 0.0,
            Some((bq, bf)) => q > bq || (q == bq && format == Exposition::OpenMetrics && bf != Exposition::OpenMetrics),
        };
        if better {
            best = Some((q, format));
        }
    }
    best.map(|(_, f)| f).unwrap_or(Exposition::OpenMetrics)
}

/// Rewrite prometheus-client's OpenMetrics text as Prometheus text 0.0.4: `# HELP`/`# TYPE`
/// name the sample (`fwc_apply_total`, not the family `fwc_apply`), `info` becomes a gauge
/// named `<family>_info`, `unknown` becomes `untyped`, and `# UNIT`, `# EOF`, `_created`
/// samples and exemplars go.
pub fn openmetrics_to_prometheus_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    // HELP precedes TYPE in a family: hold it until the type says what the sample name is.
    let mut help: Option<(&str, &str)> = None;
    let mut created: Option<String> = None;
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (sample, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_string(), kind),
                _ => (name.to_string(), "untyped"),
            };
            created = (kind == "counter" || kind == "histogram" || kind == "summary").then(|| format!("{name}_created"));
            if let Some((_, text)) = help.take().filter(|(h, _)| *h == name) {
                out.push_str(&format!("# HELP {sample} {}\n", text.replace("\\\"", "\"")));
            }
            out.push_str(&format!("# TYPE {sample} {kind}\n"));
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        } else if line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
        } else {
            if created.as_deref().is_some_and(|c| line.starts_with(c) && line[c.len()..].starts_with([' ', '{'])) {
                continue;
            }
            // An exemplar follows the value after " # ".
            let sample = line.split_once(" # ").map(|(s, _)| s).unwrap_or(line);
            out.push_str(sample);
            out.push('\n');
        }
    }
    out
}
