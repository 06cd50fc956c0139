//! PNG line plots of an experiment's series (plotters).

use std::path::Path;

use plotters::prelude::*;

use crate::error::ExperimentError;

/// One line of a plot.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
}

/// A line plot: one or more series over a shared x axis.
#[derive(Clone, Debug, Default)]
pub struct Plot {
    /// Title above the plot.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Labels for integer x positions (categories), instead of numbers.
    pub x_categories: Option<Vec<String>>,
    /// The series.
    pub series: Vec<Series>,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

impl Plot {
    /// Draws the plot into a PNG at `path`.
    pub fn draw(&self, path: &Path) -> Result<(), ExperimentError> {
        let err = |e: &dyn std::fmt::Display| ExperimentError::Plot(e.to_string());
        let points = self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
        for &(x, y) in points.filter(|(x, y)| x.is_finite() && y.is_finite()) {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
        if x0 > x1 {
            return Err(ExperimentError::Plot("no finite points to plot".into()));
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        let y1 = if y1 > 0.0 { y1 * 1.1 } else { 1.0 };
        let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0.0..y1)
            .map_err(|e| err(&e))?;
        let categories = self.x_categories.clone();
        let x_fmt = move |x: &f64| match &categories {
            Some(c) if (x.fract()).abs() < 1e-9 => c.get(*x as usize).cloned().unwrap_or_default(),
            Some(_) => String::new(),
            None => format!("{x}"),
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .x_label_formatter(&x_fmt);
        if let Some(c) = &self.x_categories {
            mesh.x_labels(c.len());
        }
        mesh.draw().map_err(|e| err(&e))?;
        for (i, s) in self.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(&s.name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png_and_refuses_an_empty_plot() {
        let path = std::env::temp_dir().join(format!("sluice-plot-{}.png", std::process::id()));
        let plot = Plot {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_categories: Some(vec!["max".into(), "0".into(), "1".into()]),
            series: vec![Series {
                name: "a".into(),
                points: vec![(0.0, 1.0), (1.0, 3.0), (2.0, f64::NAN)],
            }],
        };
        // Text needs a font (scripts/setup.sh installs fonts-dejavu-core).
        plot.draw(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        std::fs::remove_file(&path).unwrap();
        let empty = Plot::default();
        assert!(empty.draw(&path).is_err());
    }
}
