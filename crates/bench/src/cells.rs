//! The printed tables' cells, one way for every bench (`sluice bench`, `bench apps`,
//! `bench verbs`, `bench mtp`): numbers, ratios, and a failed row's reason.

/// A number with as many decimals as it needs.
pub fn fmt_num(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// [`fmt_num`], or `-` when there is no number.
pub fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("-".into(), fmt_num)
}

/// `a / b` as `1.23x`, or n/a.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "n/a".into(),
    }
}

/// How much of a failure's reason its row shows.
const ROW_REASON: usize = 120;

/// A failure's first [`ROW_REASON`] characters (the whole reason is listed under the table).
pub fn short(reason: &str) -> String {
    match reason.char_indices().nth(ROW_REASON) {
        Some((i, _)) => format!("{}...", &reason[..i]),
        None => reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_ratios_and_reasons() {
        assert_eq!(fmt_num(1234.6), "1235");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(fmt_num(1.234), "1.23");
        assert_eq!(fmt_opt(None), "-");
        assert_eq!(ratio(Some(3.0), Some(2.0)), "1.50x");
        assert_eq!(ratio(Some(3.0), Some(0.0)), "n/a");
        assert_eq!(ratio(None, Some(2.0)), "n/a");
        let long = "x".repeat(200);
        assert_eq!(short(&long).len(), ROW_REASON + 3);
        assert_eq!(short("brief"), "brief");
    }
}
