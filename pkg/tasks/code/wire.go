package code

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"slices"
	"strings"
	"unicode/utf8"
)

// The messages between rllm and its harnesses (rllm_wire.py describes
// them): one JSON object a line. Every line a harness writes is read
// here with a bound on its length, checked against the grammar below and
// written again by rllm before the other harness sees it, so the judge
// reads only rllm's own, well-formed JSON of plain values: no duplicate
// keys, no invalid UTF-8, no number of unbounded digits.

const (
	// maxDepth bounds how deeply values nest.
	maxDepth = 100
	// maxNumber bounds the characters of a number (and of a Decimal):
	// Python reads integers in time quadratic in their digits.
	maxNumber = 10000
	// maxText bounds an exception's type and text.
	maxText = 4096
)

// errProtocol marks a line that breaks the protocol.
var errProtocol = errors.New("not a message of the protocol")

func protocolErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

// readLine reads one line (without its newline) of at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 {
			return nil, protocolErr("a line longer than %d bytes", max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, protocolErr("a line cut by the end of the output")
		default:
			return nil, err
		}
	}
}

// decodeMsg reads a line as one JSON object, numbers kept as text.
func decodeMsg(line []byte) (map[string]any, error) {
	if !utf8.Valid(line) {
		return nil, protocolErr("a line that is not UTF-8")
	}
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, protocolErr("a line that is not a JSON object: %.80q", line)
	}
	if d.More() {
		return nil, protocolErr("a line with more than one JSON value: %.80q", line)
	}
	return m, nil
}

// encodeMsg is m as rllm writes it: canonical JSON and a newline.
func encodeMsg(m any) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		// Only checked values reach here; a failure is rllm's bug.
		panic(fmt.Sprintf("code: encoding a checked message: %v", err))
	}
	return append(b, '\n')
}

// requestOps are the requests a side may make, by who makes them: the
// test (or rllm for a function test) of the reply's objects, and the
// reply of the test's (call and iterate only: a function or iterator the
// test passed it).
var requestOps = map[bool]map[string]bool{
	false: {"names": true, "call": true, "get": true, "iter": true, "next": true, "len": true, "item": true, "bool": true, "str": true, "repr": true},
	true:  {"call": true, "next": true},
}

// checkRequest checks a request (fromReply: the reply's, of the test's
// objects) and returns it as rllm writes it again.
func checkRequest(m map[string]any, fromReply bool) (map[string]any, error) {
	op, _ := m["op"].(string)
	if !requestOps[fromReply][op] {
		return nil, protocolErr("request %q", op)
	}
	out := map[string]any{"op": op}
	for k, v := range m {
		var err error
		switch k {
		case "op":
			continue
		case "h":
			err = checkHandle(v)
		case "name":
			if s, ok := v.(string); !ok || len(s) > maxText {
				err = protocolErr("a name that is not a short string")
			}
		case "names":
			err = checkNames(v)
		case "args":
			l, ok := v.([]any)
			if !ok {
				err = protocolErr("args that are not a list")
			}
			for _, a := range l {
				if err == nil {
					err = checkValue(a, 0)
				}
			}
		case "kw":
			kw, ok := v.(map[string]any)
			if !ok {
				err = protocolErr("kw that is not an object")
			}
			for _, a := range kw {
				if err == nil {
					err = checkValue(a, 0)
				}
			}
		case "key":
			err = checkValue(v, 0)
		default:
			err = protocolErr("request key %q", k)
		}
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	if _, ok := out["h"]; !ok && op != "names" {
		return nil, protocolErr("request %q without a handle", op)
	}
	return out, nil
}

// checkAnswer checks an answer ({"ret": value} or {"raise": [type,
// text]}) and returns it as rllm writes it again.
func checkAnswer(m map[string]any) (map[string]any, error) {
	if len(m) != 1 {
		return nil, protocolErr("an answer with %d keys", len(m))
	}
	if v, ok := m["ret"]; ok {
		if err := checkValue(v, 0); err != nil {
			return nil, err
		}
		return map[string]any{"ret": v}, nil
	}
	if r, ok := m["raise"].([]any); ok && len(r) == 2 {
		name, ok1 := r[0].(string)
		text, ok2 := r[1].(string)
		if ok1 && ok2 && len(name) <= maxText && len(text) <= maxText {
			return map[string]any{"raise": []any{name, text}}, nil
		}
	}
	return nil, protocolErr("not an answer")
}

func checkHandle(v any) error {
	n, ok := v.(json.Number)
	if i, err := n.Int64(); !ok || err != nil || i < 0 || i >= 1<<31 || strings.ContainsAny(string(n), ".eE") {
		return protocolErr("a handle that is not a small integer")
	}
	return nil
}

func checkNames(v any) error {
	l, ok := v.([]any)
	if !ok {
		return protocolErr("names that are not a list")
	}
	for _, e := range l {
		if s, ok := e.(string); !ok || len(s) > maxText {
			return protocolErr("a name that is not a short string")
		}
	}
	return nil
}

// checkValue checks a value of rllm_wire.py's grammar.
func checkValue(v any, depth int) error {
	if depth > maxDepth {
		return protocolErr("a value nested more than %d deep", maxDepth)
	}
	depth++
	switch x := v.(type) {
	case nil, bool, string:
		return nil
	case json.Number:
		if len(x) > maxNumber {
			return protocolErr("a number of more than %d characters", maxNumber)
		}
		return nil
	case []any:
		return checkValues(x, depth)
	case map[string]any:
		if len(x) != 1 {
			return protocolErr("a tagged value with %d keys", len(x))
		}
		for tag, a := range x {
			return checkTagged(tag, a, depth)
		}
	}
	return protocolErr("a value of type %T", v)
}

func checkValues(l []any, depth int) error {
	for _, e := range l {
		if err := checkValue(e, depth); err != nil {
			return err
		}
	}
	return nil
}

func checkTagged(tag string, a any, depth int) error {
	l, isList := a.([]any)
	s, isStr := a.(string)
	bad := protocolErr("a malformed %q value", tag)
	switch tag {
	case "t", "s", "fs":
		if !isList {
			return bad
		}
		return checkValues(l, depth)
	case "d", "Counter", "OrderedDict":
		if !isList {
			return bad
		}
		return checkPairs(l, depth)
	case "b":
		if _, err := base64.StdEncoding.DecodeString(s); !isStr || err != nil {
			return bad
		}
		return nil
	case "f":
		if s != "nan" && s != "inf" && s != "-inf" {
			return bad
		}
		return nil
	case "c":
		if !isList || len(l) != 2 || !isNumber(l[0]) || !isNumber(l[1]) {
			return bad
		}
		return checkValues(l, depth)
	case "h", "j":
		return checkHandle(a)
	case "defaultdict":
		if !isList || len(l) != 2 {
			return bad
		}
		if _, ok := l[0].(string); !ok && l[0] != nil {
			return bad
		}
		pairs, ok := l[1].([]any)
		if !ok {
			return bad
		}
		return checkPairs(pairs, depth)
	case "deque":
		if !isList || len(l) != 2 {
			return bad
		}
		items, ok := l[0].([]any)
		if !ok || (l[1] != nil && checkHandle(l[1]) != nil) {
			return bad
		}
		return checkValues(items, depth)
	case "Fraction":
		if !isList || len(l) != 2 || !isInteger(l[0]) || !isInteger(l[1]) {
			return bad
		}
		return checkValues(l, depth)
	case "Decimal":
		if !isStr || len(s) > maxNumber {
			return bad
		}
		return nil
	case "nt":
		if !isList || len(l) != 3 {
			return bad
		}
		if name, ok := l[0].(string); !ok || len(name) > maxText {
			return bad
		}
		fields, ok1 := l[1].([]any)
		values, ok2 := l[2].([]any)
		if !ok1 || !ok2 || len(fields) != len(values) || checkNames(fields) != nil {
			return bad
		}
		return checkValues(values, depth)
	}
	return protocolErr("a value tagged %q", tag)
}

func checkPairs(l []any, depth int) error {
	for _, p := range l {
		kv, ok := p.([]any)
		if !ok || len(kv) != 2 {
			return protocolErr("a mapping that is not a list of pairs")
		}
		if err := checkValues(kv, depth); err != nil {
			return err
		}
	}
	return nil
}

func isNumber(v any) bool {
	if _, ok := v.(json.Number); ok {
		return true
	}
	m, ok := v.(map[string]any)
	return ok && len(m) == 1 && m["f"] != nil
}

func isInteger(v any) bool {
	n, ok := v.(json.Number)
	return ok && !strings.ContainsAny(string(n), ".eE")
}

// jsonArg turns a JSON text (a function test's argument, as rLLM's
// json.loads reads it) into a value: arrays are lists, objects dicts of
// their keys in order.
func jsonArg(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	v, err := jsonArgValue(d)
	if err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

func jsonArgValue(d *json.Decoder) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case json.Delim:
		switch x {
		case '[':
			l := []any{}
			for d.More() {
				v, err := jsonArgValue(d)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err := d.Token()
			return l, err
		case '{':
			pairs := []any{}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return nil, err
				}
				v, err := jsonArgValue(d)
				if err != nil {
					return nil, err
				}
				pairs = append(pairs, []any{k, v})
			}
			_, err := d.Token()
			return map[string]any{"d": pairs}, err
		}
	case float64:
		// Only without UseNumber; kept for completeness.
		return json.Number(fmt.Sprint(x)), nil
	}
	return t, nil
}

// unequal stands for a value no JSON value equals (NaN, a set, bytes).
type unequal struct{ text string }

// resultJSON turns a function's result into what rLLM compares with
// json.loads of the expected output (pyEqual's values): tuples and
// namedtuples are lists, mappings with string keys objects, a Fraction
// a rational, a Decimal its number; what JSON cannot hold (NaN, a set,
// bytes, a handle) equals nothing.
func resultJSON(v any) any {
	switch x := v.(type) {
	case nil, bool, string, json.Number:
		return x
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = resultJSON(e)
		}
		return out
	case map[string]any:
		for tag, a := range x {
			l, _ := a.([]any)
			switch tag {
			case "t":
				return resultJSON(l)
			case "nt":
				if len(l) == 3 {
					return resultJSON(l[2])
				}
			case "d", "Counter", "OrderedDict", "defaultdict":
				if tag == "defaultdict" && len(l) == 2 {
					l, _ = l[1].([]any)
				}
				m := map[string]any{}
				for _, p := range l {
					kv, _ := p.([]any)
					k, ok := kv[0].(string)
					if !ok {
						return unequal{text: "a dict whose keys are not all strings"}
					}
					m[k] = resultJSON(kv[1])
				}
				return m
			case "Fraction":
				if len(l) == 2 {
					n, _ := new(big.Int).SetString(string(l[0].(json.Number)), 10)
					d, _ := new(big.Int).SetString(string(l[1].(json.Number)), 10)
					if n != nil && d != nil && d.Sign() != 0 {
						return new(big.Rat).SetFrac(n, d)
					}
				}
			case "Decimal":
				if s, ok := a.(string); ok {
					if d, ok := parseDecimal(s); ok && d.r != nil {
						return d.r
					}
				}
			case "f":
				return unequal{text: fmt.Sprint(a)}
			}
			return unequal{text: fmt.Sprintf("a value tagged %q", tag)}
		}
	}
	return unequal{text: fmt.Sprintf("%v", v)}
}

// showJSON is a result as the episode shows it.
func showJSON(v any) string {
	var b strings.Builder
	showValue(&b, v)
	return b.String()
}

func showValue(b *strings.Builder, v any) {
	switch x := v.(type) {
	case unequal:
		b.WriteString("<" + x.text + ">")
	case *big.Rat:
		if x.IsInt() {
			b.WriteString(x.Num().String())
		} else {
			f, _ := x.Float64()
			if math.IsInf(f, 0) {
				b.WriteString(x.String())
			} else {
				fmt.Fprint(b, f)
			}
		}
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			showValue(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		b.WriteByte('{')
		for i, k := range slices.Sorted(maps.Keys(x)) {
			if i > 0 {
				b.WriteString(", ")
			}
			js, _ := json.Marshal(k)
			b.Write(js)
			b.WriteString(": ")
			showValue(b, x[k])
		}
		b.WriteByte('}')
	default:
		js, _ := json.Marshal(x)
		b.Write(js)
	}
}
