//! An experiment's results: a table printed on stdout, the same rows as CSV, and a PNG plot.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::ExperimentError;
use crate::plot::Plot;

/// One experiment's results.
#[derive(Debug, Default)]
pub struct Report {
    /// File stem for the CSV and the PNG (`<name>.csv`, `<name>.png`).
    pub name: String,
    /// Lines printed above the table: what ran, and how.
    pub setup: Vec<String>,
    /// Column headings.
    pub columns: Vec<String>,
    /// Rows of cells, as printed and as written to the CSV.
    pub rows: Vec<Vec<String>>,
    /// Lines printed below the table (targets, notes).
    pub notes: Vec<String>,
    /// The plot, if the experiment draws one.
    pub plot: Option<Plot>,
    /// Columns and rows the CSV holds instead of the table's (a time series behind a
    /// summary table).
    pub data: Option<(Vec<String>, Vec<Vec<String>>)>,
}

/// Where a report's files went.
#[derive(Debug)]
pub struct Written {
    /// The CSV.
    pub csv: PathBuf,
    /// The PNG, or why it could not be drawn.
    pub png: Result<PathBuf, ExperimentError>,
}

impl Report {
    /// The table as printed: setup lines, aligned columns, notes.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let mut out = String::new();
        for line in &self.setup {
            let _ = writeln!(out, "{line}");
        }
        let line = |cells: &[String]| {
            cells
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, &w))| {
                    if i == 0 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        };
        let _ = writeln!(out, "{}", line(&self.columns));
        for row in &self.rows {
            let _ = writeln!(out, "{}", line(row));
        }
        for note in &self.notes {
            let _ = writeln!(out, "{note}");
        }
        out
    }

    /// Writes `<dir>/<name>.csv` and `<dir>/<name>.png`. A plot that cannot be drawn does not
    /// lose the CSV: its error is returned in [`Written::png`].
    pub fn write(&self, dir: &Path) -> Result<Written, ExperimentError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| ExperimentError::Io(format!("create {}", dir.display()), e))?;
        let csv = dir.join(format!("{}.csv", self.name));
        let mut w =
            csv::Writer::from_path(&csv).map_err(|e| ExperimentError::Csv(e.to_string()))?;
        let (columns, rows) = match &self.data {
            Some((c, r)) => (c, r),
            None => (&self.columns, &self.rows),
        };
        w.write_record(columns)
            .map_err(|e| ExperimentError::Csv(e.to_string()))?;
        for row in rows {
            w.write_record(row)
                .map_err(|e| ExperimentError::Csv(e.to_string()))?;
        }
        w.flush()
            .map_err(|e| ExperimentError::Io(format!("write {}", csv.display()), e))?;
        let png = match &self.plot {
            Some(plot) => {
                let path = dir.join(format!("{}.png", self.name));
                plot.draw(&path).map(|()| path)
            }
            None => Err(ExperimentError::Plot(
                "this experiment draws no plot".into(),
            )),
        };
        Ok(Written { csv, png })
    }
}

/// A number with as many decimals as it needs.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `a / b` as a ratio cell ("×1.17"), or n/a.
pub fn fmt_ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() && b.is_finite() {
        format!("x{:.2}", a / b)
    } else {
        "n/a".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_aligned_and_writes_the_same_rows_as_csv() {
        let r = Report {
            name: "t".into(),
            setup: vec!["setup line".into()],
            columns: vec!["ooo".into(), "fct p99 ms".into()],
            rows: vec![
                vec!["max".into(), fmt_num(4.97)],
                vec!["0".into(), fmt_num(17.054)],
            ],
            notes: vec!["a note".into()],
            plot: None,
            data: None,
        };
        let text = r.render();
        assert!(text.starts_with("setup line\n"), "{text}");
        assert!(text.contains("max        4.97"), "{text}");
        assert!(text.contains("0          17.1"), "{text}");
        let dir = std::env::temp_dir().join(format!("sluice-report-{}", std::process::id()));
        let w = r.write(&dir).unwrap();
        let csv = std::fs::read_to_string(&w.csv).unwrap();
        assert_eq!(csv, "ooo,fct p99 ms\nmax,4.97\n0,17.1\n");
        assert!(w.png.is_err(), "no plot was asked for");
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(fmt_ratio(5.8, 4.97), "x1.17");
        assert_eq!(fmt_ratio(1.0, 0.0), "n/a");
    }
}
