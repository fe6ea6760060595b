//! The first stage of a job file: its text read into the raw shapes (syntax and unknown fields
//! are refused here, with their line), then handed to validation.

use super::model::{Format, JobSpec};
use super::raw::{RawJob, line_of_offset, task_name_lines};
use super::validate::Validator;
use crate::error::SpecError;

/// Parses and validates a job file.
pub fn parse(source: &str, format: Format, filename: &str) -> Result<JobSpec, SpecError> {
    let raw: RawJob = match format {
        Format::Toml => toml::from_str(source).map_err(|e| {
            let line = e.span().map(|s| line_of_offset(source, s.start));
            SpecError::new(filename, line, e.message().trim().to_string())
        })?,
        Format::Json => serde_json::from_str(source).map_err(|e| {
            let line = (e.line() > 0).then_some(e.line());
            // serde_json appends " at line L column C"; the line is already in our prefix.
            let msg = e.to_string();
            let msg = msg.rsplit_once(" at line ").map(|(m, _)| m.to_string()).unwrap_or(msg);
            SpecError::new(filename, line, msg)
        })?,
    };
    Validator { source, file: filename, name_lines: task_name_lines(source, format) }.validate(raw)
}
