//! Element types: those a model declares (ONNX's) and those tile memory holds.

use crate::error::{Error, Result};

/// An element type a model can declare. Codes are ONNX's TensorProto codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
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

impl DType {
    pub fn from_onnx(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            4 => DType::U16,
            5 => DType::I16,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            10 => DType::F16,
            11 => DType::F64,
            12 => DType::U32,
            13 => DType::U64,
            16 => DType::BF16,
            _ => return None,
        })
    }

    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::BF16 => 16,
        }
    }

    /// numpy's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::Bool => "bool",
            DType::F16 => "float16",
            DType::F64 => "float64",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::BF16 => "bfloat16",
        }
    }

    pub fn from_name(name: &str) -> Result<DType> {
        Ok(match name {
            "float32" => DType::F32,
            "uint8" => DType::U8,
            "int8" => DType::I8,
            "uint16" => DType::U16,
            "int16" => DType::I16,
            "int32" => DType::I32,
            "int64" => DType::I64,
            "bool" => DType::Bool,
            "float16" => DType::F16,
            "float64" => DType::F64,
            "uint32" => DType::U32,
            "uint64" => DType::U64,
            "bfloat16" => DType::BF16,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unsupported element type '{name}'"
                )))
            }
        })
    }

    pub fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::F64 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::U8
                | DType::I8
                | DType::U16
                | DType::I16
                | DType::I32
                | DType::I64
                | DType::U32
                | DType::U64
        )
    }

    /// Where a value of this type lives on the IPU when precision allows full
    /// float32 (the precision policy may narrow floats to half).
    pub fn device_default(self) -> DeviceType {
        if self.is_float() {
            DeviceType::F32
        } else if self == DType::Bool {
            DeviceType::Bool
        } else {
            DeviceType::I32
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Types tile memory holds. The IPU has no 64-bit arithmetic: 64-bit integers
/// become int32 (with a range check on the way in) and float64 becomes
/// float32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    F32 = 0,
    F16 = 1,
    I32 = 2,
    Bool = 3,
}

impl DeviceType {
    pub fn code(self) -> u8 {
        self as u8
    }
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
    pub fn as_dtype(self) -> DType {
        match self {
            DeviceType::F32 => DType::F32,
            DeviceType::F16 => DType::F16,
            DeviceType::I32 => DType::I32,
            DeviceType::Bool => DType::Bool,
        }
    }
}

impl std::fmt::Display for DeviceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod dtype_unit_tests {
    use super::*;

    const ALL: [DType; 13] = [
        DType::F32,
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::F16,
        DType::F64,
        DType::U32,
        DType::U64,
        DType::BF16,
    ];

    #[test]
    fn onnx_codes_and_names_round_trip() {
        for dt in ALL {
            assert_eq!(DType::from_onnx(dt.onnx_code()), Some(dt));
            assert_eq!(DType::from_name(dt.name()).unwrap(), dt);
            assert_eq!(dt.to_string(), dt.name());
        }
        // ONNX: 1 float, 7 int64, 9 bool, 10 float16, 16 bfloat16; 8 is
        // string and 14/15 complex, which have no element type here.
        assert_eq!(DType::from_onnx(1), Some(DType::F32));
        assert_eq!(DType::from_onnx(7), Some(DType::I64));
        assert_eq!(DType::from_onnx(16), Some(DType::BF16));
        for code in [0, 8, 14, 15, 17, -1] {
            assert_eq!(DType::from_onnx(code), None, "code {code}");
        }
        assert!(matches!(
            DType::from_name("complex64"),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn sizes_kinds_and_device_types() {
        for dt in ALL {
            assert_eq!(
                dt.size(),
                match dt {
                    DType::U8 | DType::I8 | DType::Bool => 1,
                    DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
                    DType::F32 | DType::I32 | DType::U32 => 4,
                    _ => 8,
                }
            );
            assert!(!(dt.is_float() && dt.is_int()));
            assert_eq!(dt.is_float() || dt.is_int(), dt != DType::Bool);
            let dev = dt.device_default();
            assert_eq!(dev.is_float(), dt.is_float());
            if dt == DType::Bool {
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
        for (dev, size, code) in [
            (DeviceType::F32, 4, 0),
            (DeviceType::F16, 2, 1),
            (DeviceType::I32, 4, 2),
            (DeviceType::Bool, 1, 3),
        ] {
            assert_eq!((dev.size(), dev.code()), (size, code));
            assert_eq!(dev.as_dtype().name(), dev.name());
            assert_eq!(dev.as_dtype().size(), dev.size());
        }
    }
}
