//! The crate's one error type.

/// What can go wrong in learned placement: the placement policy's libtorch calls and weight
/// files, and the interference model's configuration, samples and stored bytes. Every variant
/// names the input that was wrong.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    /// A weight file or the training thread could not be used; the message names which.
    #[error("{0}")]
    Io(String),
    /// An [`InterferenceConfig`](crate::InterferenceConfig) that cannot make a model.
    #[error("invalid interference model configuration: {0}")]
    Config(String),
    /// An interference [`Sample`](crate::Sample) that cannot be trained on.
    #[error("invalid interference sample: {0}")]
    Sample(String),
    /// Stored interference model bytes that do not decode, with where they went wrong.
    #[error("stored interference model is not usable: {what} (at byte {at})")]
    Corrupt { at: usize, what: String },
    /// Stored interference model bytes of a format this build does not read.
    #[error("stored interference model has format version {found}; this build reads version {supported}")]
    Version { found: u32, supported: u32 },
}
