//! Element types: [`ElemType`], what a model declares (ONNX's `elem_type`),
//! and [`DeviceType`], what tile memory holds.

use crate::error::{Error, Result};

/// An element type a model can declare (ONNX's `elem_type`). Codes are
/// ONNX's TensorProto codes; names are numpy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemType {
    F32,
    U8,
    I8,
    U16,
    I16,
    I32,
    I64,
    Bool,
    F16,
    F64,
    U32,
    U64,
    BF16,
}

impl ElemType {
    pub fn from_onnx(code: i32) -> Option<ElemType> {
        Some(match code {
            1 => ElemType::F32,
            2 => ElemType::U8,
            3 => ElemType::I8,
            4 => ElemType::U16,
            5 => ElemType::I16,
            6 => ElemType::I32,
            7 => ElemType::I64,
            9 => ElemType::Bool,
            10 => ElemType::F16,
            11 => ElemType::F64,
            12 => ElemType::U32,
            13 => ElemType::U64,
            16 => ElemType::BF16,
            _ => return None,
        })
    }

    pub fn onnx_code(self) -> i32 {
        match self {
            ElemType::F32 => 1,
            ElemType::U8 => 2,
            ElemType::I8 => 3,
            ElemType::U16 => 4,
            ElemType::I16 => 5,
            ElemType::I32 => 6,
            ElemType::I64 => 7,
            ElemType::Bool => 9,
            ElemType::F16 => 10,
            ElemType::F64 => 11,
            ElemType::U32 => 12,
            ElemType::U64 => 13,
            ElemType::BF16 => 16,
        }
    }

    /// numpy's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "float32",
            ElemType::U8 => "uint8",
            ElemType::I8 => "int8",
            ElemType::U16 => "uint16",
            ElemType::I16 => "int16",
            ElemType::I32 => "int32",
            ElemType::I64 => "int64",
            ElemType::Bool => "bool",
            ElemType::F16 => "float16",
            ElemType::F64 => "float64",
            ElemType::U32 => "uint32",
            ElemType::U64 => "uint64",
            ElemType::BF16 => "bfloat16",
        }
    }

    pub fn from_name(name: &str) -> Result<ElemType> {
        Ok(match name {
            "float32" => ElemType::F32,
            "uint8" => ElemType::U8,
            "int8" => ElemType::I8,
            "uint16" => ElemType::U16,
            "int16" => ElemType::I16,
            "int32" => ElemType::I32,
            "int64" => ElemType::I64,
            "bool" => ElemType::Bool,
            "float16" => ElemType::F16,
            "float64" => ElemType::F64,
            "uint32" => ElemType::U32,
            "uint64" => ElemType::U64,
            "bfloat16" => ElemType::BF16,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unsupported element type '{name}'"
                )))
            }
        })
    }

    pub fn size(self) -> usize {
        match self {
            ElemType::U8 | ElemType::I8 | ElemType::Bool => 1,
            ElemType::U16 | ElemType::I16 | ElemType::F16 | ElemType::BF16 => 2,
            ElemType::F32 | ElemType::I32 | ElemType::U32 => 4,
            ElemType::F64 | ElemType::I64 | ElemType::U64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            ElemType::F32 | ElemType::F16 | ElemType::F64 | ElemType::BF16
        )
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            ElemType::U8
                | ElemType::I8
                | ElemType::U16
                | ElemType::I16
                | ElemType::I32
                | ElemType::I64
                | ElemType::U32
                | ElemType::U64
        )
    }

    /// Where a value of this type lives on the IPU when precision allows full
    /// float32 (the precision policy may narrow floats to half).
    pub fn device_default(self) -> DeviceType {
        if self.is_float() {
            DeviceType::F32
        } else if self == ElemType::Bool {
            DeviceType::Bool
        } else {
            DeviceType::I32
        }
    }
}

impl std::fmt::Display for ElemType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Types tile memory holds. The IPU has no 64-bit arithmetic: 64-bit integers
/// become int32 (with a range check on the way in) and float64 becomes
/// float32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    F32,
    F16,
    I32,
    Bool,
}

impl DeviceType {
    pub fn size(self) -> usize {
        match self {
            DeviceType::F32 | DeviceType::I32 => 4,
            DeviceType::F16 => 2,
            DeviceType::Bool => 1,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, DeviceType::F32 | DeviceType::F16)
    }
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::F32 => "float32",
            DeviceType::F16 => "float16",
            DeviceType::I32 => "int32",
            DeviceType::Bool => "bool",
        }
    }
    /// The model type a device value of this type stands for.
    pub fn as_elem_type(self) -> ElemType {
        match self {
            DeviceType::F32 => ElemType::F32,
            DeviceType::F16 => ElemType::F16,
            DeviceType::I32 => ElemType::I32,
            DeviceType::Bool => ElemType::Bool,
        }
    }
}

impl std::fmt::Display for DeviceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [ElemType; 13] = [
        ElemType::F32,
        ElemType::U8,
        ElemType::I8,
        ElemType::U16,
        ElemType::I16,
        ElemType::I32,
        ElemType::I64,
        ElemType::Bool,
        ElemType::F16,
        ElemType::F64,
        ElemType::U32,
        ElemType::U64,
        ElemType::BF16,
    ];

    #[test]
    fn onnx_codes_and_names_round_trip() {
        for dt in ALL {
            assert_eq!(ElemType::from_onnx(dt.onnx_code()), Some(dt));
            assert_eq!(ElemType::from_name(dt.name()).unwrap(), dt);
            assert_eq!(dt.to_string(), dt.name());
        }
        // ONNX: 1 float, 7 int64, 9 bool, 10 float16, 16 bfloat16; 8 is
        // string and 14/15 complex, which have no element type here.
        assert_eq!(ElemType::from_onnx(1), Some(ElemType::F32));
        assert_eq!(ElemType::from_onnx(7), Some(ElemType::I64));
        assert_eq!(ElemType::from_onnx(16), Some(ElemType::BF16));
        for code in [0, 8, 14, 15, 17, -1] {
            assert_eq!(ElemType::from_onnx(code), None, "code {code}");
        }
        assert!(matches!(
            ElemType::from_name("complex64"),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn sizes_kinds_and_device_types() {
        for dt in ALL {
            assert_eq!(
                dt.size(),
                match dt {
                    ElemType::U8 | ElemType::I8 | ElemType::Bool => 1,
                    ElemType::U16 | ElemType::I16 | ElemType::F16 | ElemType::BF16 => 2,
                    ElemType::F32 | ElemType::I32 | ElemType::U32 => 4,
                    _ => 8,
                }
            );
            assert!(!(dt.is_float() && dt.is_int()));
            assert_eq!(dt.is_float() || dt.is_int(), dt != ElemType::Bool);
            let dev = dt.device_default();
            assert_eq!(dev.is_float(), dt.is_float());
            if dt == ElemType::Bool {
                assert_eq!(dev, DeviceType::Bool);
            } else if dt.is_int() {
                assert_eq!(
                    dev,
                    DeviceType::I32,
                    "{dt}: the IPU computes integers in int32"
                );
            } else {
                assert_eq!(dev, DeviceType::F32);
            }
        }
        for (dev, size) in [
            (DeviceType::F32, 4),
            (DeviceType::F16, 2),
            (DeviceType::I32, 4),
            (DeviceType::Bool, 1),
        ] {
            assert_eq!(dev.size(), size);
            assert_eq!(dev.as_elem_type().name(), dev.name());
            assert_eq!(dev.as_elem_type().size(), dev.size());
        }
    }
}
