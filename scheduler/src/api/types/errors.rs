//! The error body every refusal is answered with: YARN's `RemoteException`.

use serde::{Deserialize, Serialize};

/// An error body: `{"RemoteException": {...}}`, as YARN's web services send them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteExceptionBody {
    /// The error.
    #[serde(rename = "RemoteException")]
    pub remote_exception: RemoteException,
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteException {
    /// The exception's short name (`NotFoundException`), one per HTTP status.
    pub exception: String,
    /// What went wrong, for a person.
    pub message: String,
    /// YARN's Java class name for the exception, for clients written against YARN.
    #[serde(rename = "javaClassName", default)]
    pub java_class_name: String,
}
