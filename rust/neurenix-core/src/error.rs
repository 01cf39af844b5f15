//! The error spine: one enum for every failure of the compiler and runtime.
//!
//! Device implementations turn their own failures into these variants (the
//! simulator's bridge maps each C++ error code to one); the Python binding
//! maps each variant to one exception class of
//! `neurenix.hardware.graphcore.errors`.

use std::fmt::Write as _;

/// One tile that does not fit, with the largest consumers live at its peak.
#[derive(Debug, Clone, PartialEq)]
pub struct TileOverflow {
    pub ipu: u32,
    pub tile: u32,
    pub used: u64,
    pub capacity: u64,
    /// Live at the tile's peak, largest first, with the nodes that own them.
    pub largest: Vec<crate::report::TileTensor>,
}

/// A tensor larger than one IPU's memory (so no plan can place it).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorOverflow {
    pub name: String,
    /// Bytes it needs on the device (saturating at `u64::MAX`).
    pub bytes: u64,
    /// Bytes of tile memory of one IPU.
    pub capacity: u64,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A malformed argument or option.
    #[error("{0}")]
    InvalidArgument(String),
    /// Shapes or element types that do not agree inside the model.
    #[error("{message}")]
    ShapeMismatch { node: String, message: String },
    /// Some tiles overflow, or one tensor is larger than an IPU.
    #[error("{message}")]
    OutOfMemory {
        tiles: Vec<TileOverflow>,
        tensor: Option<TensorOverflow>,
        message: String,
    },
    /// The IPUs asked for are attached elsewhere.
    #[error("{message}")]
    DeviceUnavailable {
        ipus: Vec<u32>,
        pids: Vec<i32>,
        message: String,
    },
    /// An operator (or operator form) the compiler does not implement.
    #[error("{message}")]
    Unsupported {
        op_type: String,
        node: String,
        domain: String,
        opset: i64,
        supported: Vec<String>,
        message: String,
    },
    /// The model itself is malformed.
    #[error("{0}")]
    ModelFormat(String),
    /// Inputs given to compile or execute do not match the model.
    #[error("{message}")]
    InputMismatch { input: String, message: String },
    /// A call made in the wrong state (detached device, compile-only...).
    #[error("{0}")]
    InvalidState(String),
    /// A floating-point exception on the device (with exceptions enabled):
    /// an overflow, invalid operation or division by zero.
    #[error("{0}")]
    FloatingPoint(String),
    /// A broken invariant: a bug in neurenix.
    #[error("internal error (please report): {0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn shape(node: &str, message: impl Into<String>) -> Error {
        let message = message.into();
        Error::ShapeMismatch {
            node: node.to_string(),
            message: if node.is_empty() {
                message
            } else {
                format!("node '{node}': {message}")
            },
        }
    }

    pub fn model(message: impl Into<String>) -> Error {
        Error::ModelFormat(message.into())
    }

    pub fn unsupported(
        op_type: &str,
        node: &str,
        domain: &str,
        opset: i64,
        detail: &str,
        supported: Vec<String>,
    ) -> Error {
        let dom = if domain.is_empty() {
            "ai.onnx".to_string()
        } else {
            domain.to_string()
        };
        let mut message = format!(
            "operator {op_type} (node '{node}', domain {dom}, opset {opset}) is not supported"
        );
        if !detail.is_empty() {
            let _ = write!(message, ": {detail}");
        }
        let _ = write!(message, ". Supported operators: {}", supported.join(", "));
        Error::Unsupported {
            op_type: op_type.to_string(),
            node: node.to_string(),
            domain: dom,
            opset,
            supported,
            message,
        }
    }

    /// An element type neurenix does not hold, where a node uses it
    /// (`node` and `op_type` may be empty for a graph input or initializer
    /// no node reads). `message` says what, where and what to do.
    pub fn unsupported_type(op_type: &str, node: &str, opset: i64, message: String) -> Error {
        Error::Unsupported {
            op_type: op_type.to_string(),
            node: node.to_string(),
            domain: "ai.onnx".into(),
            opset,
            supported: Vec::new(),
            message,
        }
    }

    /// Builds the out-of-memory error, naming every overflowing tile the way
    /// Poplar does.
    pub fn out_of_memory(tiles: Vec<TileOverflow>, hint: &str) -> Error {
        let mut message = String::new();
        let shown = 16;
        for t in tiles.iter().take(shown) {
            let _ = writeln!(
                message,
                "Out of memory on IPU {} tile {}: {} bytes used but tiles only have {} bytes of memory",
                t.ipu,
                t.tile,
                group_digits(t.used),
                group_digits(t.capacity)
            );
            if !t.largest.is_empty() {
                let parts: Vec<String> = t
                    .largest
                    .iter()
                    .map(|t| {
                        if t.node.is_empty() || t.node == t.name {
                            format!("{} ({} B)", t.name, group_digits(t.bytes))
                        } else {
                            format!("{} ({} B, node {})", t.name, group_digits(t.bytes), t.node)
                        }
                    })
                    .collect();
                let _ = writeln!(message, "  largest on this tile: {}", parts.join(", "));
            }
        }
        if tiles.len() > shown {
            let _ = writeln!(message, "... and {} more tiles", tiles.len() - shown);
        }
        message.push_str(hint);
        Error::OutOfMemory {
            tiles,
            tensor: None,
            message,
        }
    }
}

/// 702144 -> "702,144".
pub fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_message_names_tiles() {
        let e = Error::out_of_memory(
            vec![TileOverflow {
                ipu: 0,
                tile: 37,
                used: 702144,
                capacity: 638976,
                largest: vec![crate::report::TileTensor {
                    name: "w".into(),
                    node: "dense".into(),
                    bytes: 500000,
                }],
            }],
            "",
        );
        let msg = e.to_string();
        assert!(msg.contains(
            "Out of memory on IPU 0 tile 37: 702,144 bytes used but tiles only have 638,976 bytes"
        ));
        assert!(msg.contains("w (500,000 B, node dense)"));
    }

    #[test]
    fn digits() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(638976), "638,976");
    }
}
