package gateway

// JSONKind names a Go kind (reflect.Kind's String, as json.UnmarshalTypeError
// carries it) the way a JSON client thinks of it: "an array", "an integer",
// ... Every API's request decoder uses it to say what a field wanted.
func JSONKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	}
	return k
}
