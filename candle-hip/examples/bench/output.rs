//! Result rows: printed as they come and written to `bench_ours.csv`, with
//! the device facts in `bench_ours.json`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::cases::{Case, Measure};

/// CSV columns; `benches/report.py` reads them by name.
const HEADER: &str = "family,op,shape,dtype,metric,ours_us,gbps_or_tflops,pct_copy,error";

/// How a case ended.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Microseconds per run (or per op for the host-overhead cases).
    Time(f64),
    /// The backend's error message (one line), or a panic's.
    Error(String),
}

/// One result row.
#[derive(Clone, Debug)]
pub struct Row {
    family: String,
    op: String,
    shape: String,
    dtype: String,
    metric: &'static str,
    time_us: Option<f64>,
    rate: Option<f64>,
    pct_copy: Option<f64>,
    error: Option<String>,
}

impl Row {
    /// The row of `case`; `copy_gbps` is the measured device copy bandwidth.
    pub fn new(case: &Case, outcome: Outcome, copy_gbps: Option<f64>) -> Row {
        let (time_us, error) = match outcome {
            Outcome::Time(us) => (Some(us), None),
            Outcome::Error(e) => (None, Some(e)),
        };
        let rate = time_us.and_then(|us| case.measure.rate(us));
        let pct_copy = match (case.measure, rate, copy_gbps) {
            (Measure::Bytes(_), Some(gbps), Some(copy)) if copy > 0.0 => Some(100.0 * gbps / copy),
            _ => None,
        };
        Row {
            family: case.family.to_string(),
            op: case.op.to_string(),
            shape: case.shape.clone(),
            dtype: case.dtype.clone(),
            metric: case.measure.metric(),
            time_us,
            rate,
            pct_copy,
            error,
        }
    }

    /// A start-up row (compile cost): a duration in microseconds, shown in ms.
    pub fn startup(op: &str, outcome: Outcome) -> Row {
        let (time_us, error) = match outcome {
            Outcome::Time(us) => (Some(us), None),
            Outcome::Error(e) => (None, Some(e)),
        };
        Row {
            family: "startup".to_string(),
            op: op.to_string(),
            shape: "all modules".to_string(),
            dtype: "-".to_string(),
            metric: "ms",
            time_us,
            rate: None,
            pct_copy: None,
            error,
        }
    }

    fn csv_line(&self) -> String {
        let number = |v: Option<f64>| v.map(|x| format!("{x:.3}")).unwrap_or_default();
        [
            csv_field(&self.family),
            csv_field(&self.op),
            csv_field(&self.shape),
            csv_field(&self.dtype),
            csv_field(self.metric),
            number(self.time_us),
            number(self.rate),
            number(self.pct_copy),
            csv_field(self.error.as_deref().unwrap_or("")),
        ]
        .join(",")
    }

    fn console_line(&self) -> String {
        let key = format!(
            "{:<10} {:<22} {:<34} {:<10}",
            self.family, self.op, self.shape, self.dtype
        );
        match (&self.error, self.time_us) {
            (Some(e), _) => format!("{key} ERROR {e}"),
            (None, Some(us)) if self.metric == "ms" => format!("{key} {:>12.1} ms", us / 1000.0),
            (None, Some(us)) => {
                let rate = self
                    .rate
                    .map(|r| format!("{r:>9.1} {}", self.metric))
                    .unwrap_or_default();
                let pct = self
                    .pct_copy
                    .map(|p| format!("{p:>6.1}% of copy"))
                    .unwrap_or_default();
                format!("{key} {us:>12.2} us {rate} {pct}")
            }
            (None, None) => format!("{key} no result"),
        }
    }
}

/// Where rows go: the console and the CSV file (flushed after every row,
/// so a crash keeps what was measured).
pub struct Sink {
    dir: PathBuf,
    csv_path: PathBuf,
    csv: BufWriter<File>,
}

impl Sink {
    /// Creates `dir` and `dir/bench_ours.csv` with its header.
    pub fn create(dir: &Path) -> io::Result<Sink> {
        std::fs::create_dir_all(dir)?;
        let csv_path = dir.join("bench_ours.csv");
        let mut csv = BufWriter::new(File::create(&csv_path)?);
        writeln!(csv, "{HEADER}")?;
        csv.flush()?;
        Ok(Sink {
            dir: dir.to_path_buf(),
            csv_path,
            csv,
        })
    }

    /// The CSV file's path.
    pub fn csv_path(&self) -> &Path {
        &self.csv_path
    }

    /// Writes `bench_ours.json`: device name, architecture and the measured
    /// copy bandwidth (null when it could not be measured).
    pub fn write_meta(&self, device: &str, arch: &str, copy_gbps: Option<f64>) -> io::Result<()> {
        let copy = copy_gbps
            .map(|g| format!("{g:.3}"))
            .unwrap_or_else(|| "null".to_string());
        let json = format!(
            "{{\"device\": {}, \"arch\": {}, \"copy_gbps\": {copy}, \"platform\": {}}}\n",
            json_string(device),
            json_string(arch),
            json_string("candle-hip through HIP (hip-safe)")
        );
        std::fs::write(self.dir.join("bench_ours.json"), json)
    }

    /// Prints `row` and appends it to the CSV.
    pub fn write(&mut self, row: &Row) -> io::Result<()> {
        println!("{}", row.console_line());
        writeln!(self.csv, "{}", row.csv_line())?;
        self.csv.flush()
    }
}

/// A CSV field, quoted when it holds a comma, quote or line break.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// A JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Most characters of an error text kept in a row.
const MAX_ERROR_CHARS: usize = 600;

/// An error message on one line: its non-empty lines joined with ` | `
/// (a compiler log follows its headline on the next lines), without the
/// backtrace candle appends when `RUST_BACKTRACE` is set, and shortened to
/// [`MAX_ERROR_CHARS`].
pub fn one_line(message: &str) -> String {
    let is_backtrace = |l: &str| {
        l.starts_with("stack backtrace:")
            || l.split_once(": ")
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .take_while(|l| !is_backtrace(l))
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return "unknown error".to_string();
    }
    let joined = lines.join(" | ");
    match joined.char_indices().nth(MAX_ERROR_CHARS) {
        Some((cut, _)) => format!("{}...", &joined[..cut]),
        None => joined,
    }
}

/// The message of a caught panic.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        one_line(s)
    } else {
        "non-text panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        assert_eq!(csv_field("add"), "add");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(
            json_string("NVIDIA \"H100\"\\"),
            "\"NVIDIA \\\"H100\\\"\\\\\""
        );
        assert_eq!(json_string("a\nb"), "\"a\\u000ab\"");
    }

    #[test]
    fn one_line_joins_lines_and_drops_the_backtrace() {
        let e =
            "\n  matmul is not yet supported on HIP\nstack backtrace:\n   0: candle_core::error";
        assert_eq!(one_line(e), "matmul is not yet supported on HIP");
        let e = "hipRTC compilation of `a.hip` failed (code 6):\na.hip(3): error: bad\n\n   0: std::backtrace";
        assert_eq!(
            one_line(e),
            "hipRTC compilation of `a.hip` failed (code 6): | a.hip(3): error: bad"
        );
        assert_eq!(one_line(""), "unknown error");
        let long = "x".repeat(MAX_ERROR_CHARS + 10);
        assert_eq!(one_line(&long).len(), MAX_ERROR_CHARS + 3);
    }
}
