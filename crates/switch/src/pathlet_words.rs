//! A port's MTP pathlet as the port spec spells it: `pathlet=ID`, `pathlet-tc=TC`,
//! `feedback=ecn[:K]|rate|queue`.

use sluice_fabric::mtp::{FeedbackPolicy, Pathlet};
use sluice_fabric::LinkConfig;

use crate::units::{bad, parse_size, ConfigError};

/// ECN's K when neither `feedback=ecn:K` nor the port's `ecn-k` gives one: 20 full frames
/// (mtp.txt 5.1's marking threshold of 20 packets).
const DEFAULT_ECN_K: usize = 20 * 1514;

/// `ecn[:K]`, `rate` or `queue`; ECN's K defaults to `default_k`.
pub fn parse_feedback(value: &str, default_k: usize) -> Result<FeedbackPolicy, ConfigError> {
    match value.split_once(':') {
        None if value == "ecn" => Ok(FeedbackPolicy::Ecn { k_bytes: default_k }),
        None if value == "rate" => Ok(FeedbackPolicy::Rate),
        None if value == "queue" => Ok(FeedbackPolicy::QueueBytes),
        Some(("ecn", k)) => Ok(FeedbackPolicy::Ecn {
            k_bytes: parse_size("feedback", k)?,
        }),
        _ => Err(bad(
            "feedback",
            format!("{value:?}: expected ecn[:K], rate or queue"),
        )),
    }
}

/// A port spec's pathlet words, gathered before the egress is known.
#[derive(Debug, Default)]
pub(crate) struct PathletWords {
    id: Option<u16>,
    tc: Option<u8>,
    feedback: Option<String>,
}

impl PathletWords {
    /// Takes `key=value` if it is a pathlet word (true), or leaves it (false).
    pub(crate) fn take(&mut self, key: &str, value: &str) -> Result<bool, ConfigError> {
        let number = |max: u64| {
            value
                .parse::<u64>()
                .ok()
                .filter(|v| *v <= max)
                .ok_or_else(|| bad(key, format!("{value:?} is not a number up to {max}")))
        };
        match key {
            "pathlet" => self.id = Some(number(u64::from(u16::MAX))? as u16),
            "pathlet-tc" => self.tc = Some(number(u64::from(u8::MAX))? as u8),
            "feedback" => self.feedback = Some(value.to_owned()),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The pathlet, if an id was given (a TC or feedback without one is refused).
    pub(crate) fn build(self, egress: &LinkConfig) -> Result<Option<Pathlet>, ConfigError> {
        let Some(id) = self.id else {
            if self.tc.is_some() || self.feedback.is_some() {
                return Err(bad("pathlet", "pathlet-tc and feedback need pathlet=ID"));
            }
            return Ok(None);
        };
        let k = egress.ecn_threshold_bytes.unwrap_or(DEFAULT_ECN_K);
        let feedback = match &self.feedback {
            Some(f) => parse_feedback(f, k)?,
            None => FeedbackPolicy::Ecn { k_bytes: k },
        };
        Ok(Some(Pathlet {
            id,
            tc: self.tc,
            feedback,
        }))
    }
}
