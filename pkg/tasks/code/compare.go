package code

import (
	"bytes"
	"encoding/json"
	"math/big"
	"regexp"
	"strings"
)

// OutputsMatch compares a program's standard output with the expected
// one as rLLM's LiveCodeBench runner does
// (rllm/rewards/code_utils/livecodebench.py, grade_stdio): both are
// stripped and split into lines, each line stripped; the line counts
// must agree and each pair of lines must be equal, or be equal lists of
// decimal numbers (so 3.0 == 3, 007 == 7, 1E+3 == 1000), with no float
// tolerance.
func OutputsMatch(got, want string) bool {
	g := strings.Split(strings.TrimSpace(got), "\n")
	w := strings.Split(strings.TrimSpace(want), "\n")
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		a, b := strings.TrimSpace(g[i]), strings.TrimSpace(w[i])
		if a == b {
			continue
		}
		if !decimalsEqual(a, b) {
			return false
		}
	}
	return true
}

// decimalsEqual is rLLM's fallback: both lines split on whitespace into
// tokens that all parse as Python Decimals, pairwise equal.
func decimalsEqual(a, b string) bool {
	ta, tb := strings.Fields(a), strings.Fields(b)
	if len(ta) != len(tb) {
		return false
	}
	for i := range ta {
		x, ok1 := parseDecimal(ta[i])
		y, ok2 := parseDecimal(tb[i])
		if !ok1 || !ok2 || !x.equal(y) {
			return false
		}
	}
	return true
}

// decimal is a parsed Python Decimal: finite (a rational), ±Infinity
// or NaN (never equal to anything).
type decimal struct {
	r   *big.Rat
	inf int // +1, -1; 0 when finite
	nan bool
}

func (d decimal) equal(e decimal) bool {
	if d.nan || e.nan {
		return false
	}
	if d.inf != 0 || e.inf != 0 {
		return d.inf == e.inf
	}
	return d.r.Cmp(e.r) == 0
}

var reDecimal = regexp.MustCompile(`^[+-]?(\d+(_\d+)*(\.(\d+(_\d+)*)?)?|\.\d+(_\d+)*)([eE][+-]?\d+(_\d+)*)?$`)

// maxExponent bounds the exponents compared exactly; a longer one
// (1e999999999) compares by text so that no huge number is built.
const maxExponent = 4000

// parseDecimal reads a token as Python's Decimal() constructor does.
func parseDecimal(s string) (decimal, bool) {
	low := strings.ToLower(s)
	sign := 1
	body := low
	if strings.HasPrefix(body, "+") || strings.HasPrefix(body, "-") {
		if body[0] == '-' {
			sign = -1
		}
		body = body[1:]
	}
	switch body {
	case "inf", "infinity":
		return decimal{inf: sign}, true
	case "nan", "snan":
		return decimal{nan: true}, true
	}
	if !reDecimal.MatchString(s) {
		return decimal{}, false
	}
	clean := strings.ReplaceAll(s, "_", "")
	if i := strings.IndexAny(clean, "eE"); i >= 0 {
		exp := strings.TrimLeft(clean[i+1:], "+-")
		if len(strings.TrimLeft(exp, "0")) > 4 {
			return decimal{}, false
		}
		var e big.Int
		e.SetString(clean[i+1:], 10)
		if e.CmpAbs(big.NewInt(maxExponent)) > 0 {
			return decimal{}, false
		}
	}
	r, ok := new(big.Rat).SetString(clean)
	if !ok {
		return decimal{}, false
	}
	return decimal{r: r}, true
}

func decodeNumbers(s string, v *any) error {
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return &json.SyntaxError{Offset: d.InputOffset()}
	}
	return nil
}

func pyEqual(a, b any) bool {
	if ra, ok := number(a); ok {
		rb, ok := number(b)
		return ok && ra.Cmp(rb) == 0
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case json.Number: // too large to compare by value
		y, ok := b.(json.Number)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !pyEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !pyEqual(v, w) {
				return false
			}
		}
		return true
	}
	return false
}

// number is a JSON number or a boolean (Python's bool is an int) as a
// rational.
func number(v any) (*big.Rat, bool) {
	switch x := v.(type) {
	case *big.Rat: // a function's Fraction or Decimal (resultJSON)
		return x, true
	case bool:
		if x {
			return big.NewRat(1, 1), true
		}
		return new(big.Rat), true
	case json.Number:
		if d, ok := parseDecimal(string(x)); ok && d.r != nil {
			return d.r, true
		}
	}
	return nil, false
}
