package anyval

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// Kind names the JSON type of a decoded value for a message, with its
// article: "null", "a boolean", "a number", "a string", "an array" or "an
// object". Any Go integer or float counts as a number (parquet and YAML
// hand those over), and so does json.Number; anything else is named by its
// Go type.
func Kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	if rv := reflect.ValueOf(v); rv.CanInt() || rv.CanUint() || rv.CanFloat() {
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}
