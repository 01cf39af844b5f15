//! C++ errors into the core's error enum: the bridge keeps the code of the
//! exception it caught aside (`ffi::last_error_code`), the message crosses
//! as the `cxx::Exception`'s text.

use neurenix_core::error::Error;

use crate::bridge::ffi;

/// The core error for the C++ exception that just made a bridged call fail
/// on this thread.
pub(crate) fn from_cxx(e: cxx::Exception) -> Error {
    let message = e.what().to_string();
    match ffi::last_error_code() {
        ffi::ErrorCode::kInvalidArgument => Error::InvalidArgument(message),
        ffi::ErrorCode::kShapeMismatch => Error::ShapeMismatch {
            node: String::new(),
            message,
        },
        ffi::ErrorCode::kOutOfMemory => Error::OutOfMemory {
            tiles: Vec::new(),
            tensor: None,
            message,
        },
        ffi::ErrorCode::kDeviceUnavailable => Error::DeviceUnavailable {
            ipus: Vec::new(),
            pids: Vec::new(),
            message,
        },
        ffi::ErrorCode::kUnsupported => Error::Unsupported {
            op_type: String::new(),
            node: String::new(),
            domain: String::new(),
            opset: 0,
            supported: Vec::new(),
            message,
        },
        ffi::ErrorCode::kInvalidState => Error::InvalidState(message),
        ffi::ErrorCode::kFloatingPoint => Error::FloatingPoint(message),
        _ => Error::Internal(message),
    }
}
