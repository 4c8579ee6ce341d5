package jsonw

import (
	"math"
	"slices"
	"strconv"
)

// AppendAny appends v as json.Marshal writes it, for the values
// encoding/json decodes into an interface{}: map[string]any (keys sorted),
// []any, float64, string, bool and nil, nested. It reports false, having
// appended a partial value, for any other type and for a NaN or an
// infinity (which json.Marshal refuses); the caller then uses
// json.Marshal.
func AppendAny(b []byte, v any) ([]byte, bool) {
	if Off.Load() {
		return b, false
	}
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		return strconv.AppendBool(b, v), true
	case string:
		return AppendString(b, v), true
	case float64:
		return appendFloat(b, v)
	case []any:
		if v == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = AppendAny(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		if v == nil {
			return append(b, "null"...), true
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = AppendAny(b, v[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

// appendFloat is encoding/json's float64 encoder: the shortest form, with
// an exponent only below 1e-6 or from 1e21, and no leading zero in it.
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 as e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}
