//! The crate's one error type: every way a value from the network, a job file or a tool's output
//! breaks the contract — an id or name, a collective parameter's name, a shared rule, a proto
//! message, a GPU topology matrix or a label — each variant naming the input that was wrong.

/// Everything the contract can refuse, with the input it refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A piece of text that is not a valid id or name ([`crate::ids`]).
    #[error("invalid {what} {input:?}: {reason}")]
    Id { what: &'static str, input: String, reason: String },

    /// A name that is not one of an enum's names ([`crate::collective`]): `what` says what was
    /// being named ("dtype", "reduce op", "collective algorithm").
    #[error("unknown {what} {got:?}; expected one of {}", expected.join(", "))]
    UnknownName { what: &'static str, got: String, expected: &'static [&'static str] },

    /// An environment variable name that is not valid ([`crate::rules`]).
    #[error("env key {0:?} is not a valid variable name")]
    EnvKey(String),
    /// An environment variable name the worker reserves.
    #[error("env key {0:?} is reserved (PLEXUS_* are set by the worker)")]
    ReservedEnvKey(String),
    /// More rail addresses than a worker may have.
    #[error("{count} rail addresses; at most {max}")]
    TooManyRails { count: usize, max: usize },
    /// A rail address that is not `ip:port`.
    #[error("rail address {0:?} is not ip:port")]
    RailAddr(String),

    /// A field of a proto message that holds an invalid id or name ([`crate::convert`]).
    #[error("field {field}: {source}")]
    Field { field: &'static str, source: Box<Error> },
    /// A field of a proto message with a value outside its rules.
    #[error("field {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// A required field of a proto message that is absent.
    #[error("field {0} is missing")]
    Missing(&'static str),

    /// A topology matrix longer than is read ([`crate::topology`]).
    #[error("the output is {len} bytes; at most {max} are read")]
    TooLarge { len: usize, max: usize },
    /// A topology output without a matrix header.
    #[error("no matrix header (a line starting with GPU0) in the output")]
    NoHeader,
    /// A token of a topology matrix that is wrong where it is.
    #[error("line {line}: {reason}: {token}")]
    Token { line: usize, token: String, reason: &'static str },
    /// A line of a topology matrix that is wrong as a whole.
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: String },
    /// A GPU with a column in the matrix's header but no row.
    #[error("GPU{0} has a column in the header but no row")]
    MissingRow(u32),
    /// A matrix whose links differ in the two directions (`ab`, `ba`: the link levels as written).
    #[error("GPU{a}/GPU{b} is {ab} but GPU{b}/GPU{a} is {ba}: the matrix is not symmetric")]
    Asymmetric { a: u32, b: u32, ab: String, ba: String },
    /// A token that is not a link level.
    #[error("{0} is not a link level (expected X, NV#, PIX, PXB, PHB, NODE, SYS or SOC)")]
    Level(String),
    /// A worker label that breaks the label rules.
    #[error("label {label}: {reason}")]
    Label { label: String, reason: String },

    /// A copy of an object whose bytes do not hash to the digest its attempt reported
    /// (both digests in their hex text; see `digest.rs`): `holder` says where the copy came from.
    #[error(
        "{object} from {holder} does not match its digest: expected BLAKE3 {expected}, got {got} (the copy was changed after its attempt completed)"
    )]
    DigestMismatch { object: String, holder: String, expected: String, got: String },
}

impl Error {
    /// An invalid id or name: `what` it was meant to be, the `input`, and why it is not.
    pub(crate) fn id(what: &'static str, input: &str, reason: impl Into<String>) -> Error {
        Error::Id { what, input: input.to_string(), reason: reason.into() }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
